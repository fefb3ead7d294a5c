"""grain_core.experimental.visualize: text, Mermaid, DOT and SVG pictures of pipelines."""

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


def test_png_and_unknown_format_are_refused(tmp_path):
    with pytest.raises(ValueError, match="PNG"):
        visualize(_linear(), path=tmp_path / "x.png")
    with pytest.raises(ValueError, match="format"):
        visualize(_linear(), format="pdf")
