"""grain_core.experimental.visualize: text, Mermaid, DOT, SVG and PNG pictures of pipelines."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

import grain_core as grain
from grain_core.experimental import visualize


def _linear():
    return grain.MapDataset.range(100).seed(3).shuffle().map(lambda x: x + 1).batch(4).to_iter_dataset()


def _mixed():
    a = grain.MapDataset.range(10).map(lambda x: x)
    b = grain.MapDataset.range(20).filter(lambda x: x % 2 == 0)
    return grain.MapDataset.mix([a, b], [0.5, 0.5]).batch(2)


def test_text_lists_every_stage_in_order():
    text = visualize(_linear())
    names = ["SourceMapDataset", "SeedMapDataset", "ShuffleMapDataset", "MapMapDataset",
             "BatchMapDataset", "PrefetchIterDataset"]
    positions = [text.index(n) for n in names]
    assert positions == sorted(positions)


def test_text_branches_for_mix():
    text = visualize(_mixed())
    assert "└ " in text and "MixedMapDataset" in text and "FilterMapDataset" in text


def test_mermaid_has_nodes_and_edges():
    out = visualize(_mixed(), format="mermaid")
    assert out.startswith("flowchart TD")
    # two sources, each -> its stage -> mix -> batch
    assert out.count("-->") == 5
    assert "MixedMapDataset" in out


def test_dot_is_a_digraph():
    out = visualize(_linear(), format="dot")
    assert out.startswith("digraph pipeline {") and out.rstrip().endswith("}")
    assert out.count("->") == 5
    assert "ShuffleMapDataset" in out


@pytest.mark.parametrize("make", [_linear, _mixed])
def test_svg_file_is_valid_and_names_stages(tmp_path, make):
    path = tmp_path / "pipe.svg"
    visualize(make(), path=path)
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for n in ("SourceMapDataset", "BatchMapDataset"):
        assert n in texts
    rects = list(root.iter("{http://www.w3.org/2000/svg}rect"))
    assert len(rects) == len(_stage_labels(make()))


def _stage_labels(ds):
    from grain_core.visualize import pipeline_graph

    return pipeline_graph(ds).labels


def test_svg_escapes_labels(tmp_path):
    ds = grain.MapDataset.source(["<a>", "&b"]).map(lambda x: x)
    out = visualize(ds, format="svg")
    ET.fromstring(out.split("\n", 1)[1])


def test_other_paths_get_the_format_text(tmp_path):
    path = tmp_path / "pipe.mmd"
    out = visualize(_linear(), format="mermaid", path=path)
    assert path.read_text().strip() == out


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="format"):
        visualize(_linear(), format="pdf")


def test_layout_has_a_box_per_stage_and_branches():
    from grain_core.visualize import pipeline_layout

    ds = _mixed()
    lay = pipeline_layout(ds)
    assert [b.label for b in lay.boxes] == _stage_labels(ds)
    by_label = {b.label.split("(")[0]: b for b in lay.boxes}
    sources = [b for b in lay.boxes if b.label.startswith("SourceMapDataset")]
    assert len(sources) == 2 and sources[0].y == sources[1].y  # two branches, side by side
    mix = by_label["MixedMapDataset"]
    assert sum(1 for e in lay.edges if e[3] == mix.y and mix.x <= e[2] <= mix.x + mix.width) == 2
    assert by_label["BatchMapDataset"].y > mix.y  # the output is below
    for b in lay.boxes:
        assert 0 <= b.x and b.x + b.width <= lay.width and b.y + b.height <= lay.height


def test_svg_draws_the_shared_layout():
    from grain_core.visualize import pipeline_layout

    ds = _mixed()
    lay = pipeline_layout(ds)
    root = ET.fromstring(visualize(ds, format="svg").split("\n", 1)[1])
    rects = list(root.iter("{http://www.w3.org/2000/svg}rect"))
    assert [float(r.get("x")) for r in rects] == [round(b.x, 1) for b in lay.boxes]
    assert len(list(root.iter("{http://www.w3.org/2000/svg}line"))) == len(lay.edges)


def _hex(color):
    return tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))


@pytest.mark.parametrize("make", [_linear, _mixed])
def test_png_file_is_a_valid_picture_of_the_layout(tmp_path, make):
    Image = pytest.importorskip("PIL.Image")
    from grain_core.visualize import _FILLS, _png_image, pipeline_graph

    ds = make()
    path = tmp_path / "pipe.png"
    assert visualize(ds, path=path) == visualize(ds)  # returns the format text, writes the PNG
    with Image.open(path) as img:
        assert img.format == "PNG"
        img.load()
        width, height = img.size
        assert width > 0 and height > 0
        rgb = img.convert("RGB")
    drawn, lay = _png_image(pipeline_graph(ds))
    assert drawn.size == (width, height)
    assert [b.label for b in lay.boxes] == _stage_labels(ds)
    assert "SourceMapDataset" in lay.boxes[0].text and "BatchMapDataset" in " ".join(
        b.text for b in lay.boxes
    )
    # Not blank: boxes, text and arrows leave plenty of non-white pixels ...
    colors = rgb.getcolors(maxcolors=1 << 20)
    non_white = sum(n for n, c in colors if c != (255, 255, 255))
    assert non_white > 0.05 * width * height
    assert any(sum(c) < 200 for _, c in colors)  # dark pixels: outlines, text, arrows
    # ... and each box is filled with its kind's colour where the layout put it.
    scale = width / lay.width
    for b in lay.boxes:
        inside = (int((b.x + 4) * scale), int((b.y + 4) * scale))
        assert rgb.getpixel(inside) == _hex(_FILLS[b.kind]), b.label
    assert rgb.getpixel((1, 1)) == (255, 255, 255)


def test_png_without_pillow_says_what_to_install(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "PIL", None)  # "import PIL" raises ImportError
    path = tmp_path / "x.png"
    with pytest.raises(ImportError, match=r"pip install grain-core-kernel\[viz\]"):
        visualize(_linear(), path=path)
    assert not path.exists()


def test_short_branches_start_lower_so_no_arrow_crosses_a_row():
    import grain_core as grain
    from grain_core.visualize import pipeline_layout

    long = grain.MapDataset.range(5).map(lambda x: x).map(lambda x: x + 1).shuffle(seed=1)
    short = grain.MapDataset.range(3)
    layout = pipeline_layout(grain.MapDataset.mix([long, short]).batch(2))
    row_height = min(b2.y - b1.y for b1 in layout.boxes for b2 in layout.boxes if b2.y > b1.y)
    for _, y1, _, y2 in layout.edges:
        gap = y2 - y1  # from the bottom of the parent's box to the top of the child's
        assert gap < row_height, "an arrow skips a row"
