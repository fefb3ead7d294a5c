"""Pictures of a pipeline: text, Mermaid, Graphviz DOT, or an SVG / PNG file drawn without graphviz.

``grain_core.experimental.visualize(ds)`` walks the stages from the sources to ``ds``; stages with
several parents (mixes, zips, interleaves) become branches. SVG and PNG share one layered layout
(:func:`pipeline_layout`); PNG needs Pillow (``pip install grain-core-kernel[viz]``).
"""

from __future__ import annotations

import dataclasses
import html
import math
import os
from collections.abc import Callable
from typing import Any

__all__ = ["Box", "Layout", "PipelineGraph", "pipeline_graph", "pipeline_layout", "visualize"]

FORMATS = ("text", "mermaid", "dot", "svg")


@dataclasses.dataclass
class PipelineGraph:
    """Stages as nodes (sources first) and ``(parent, child)`` edges between their indices."""

    labels: list[str]
    kinds: list[str]  # "map" (MapDataset), "iter" (IterDataset) or "other"
    edges: list[tuple[int, int]]
    output: int

    def layers(self) -> list[int]:
        """Each node's layer: the longest path from a source, then every stage moved down to just
        above its nearest child, so an edge of a tree-shaped pipeline spans exactly one layer (a
        short branch of a mix starts lower instead of an arrow crossing other boxes)."""
        layer = [0] * len(self.labels)
        changed = True
        while changed:
            changed = False
            for a, b in self.edges:
                if layer[b] < layer[a] + 1:
                    layer[b] = layer[a] + 1
                    changed = True
        children: dict[int, list[int]] = {}
        for a, b in self.edges:
            children.setdefault(a, []).append(b)
        changed = True
        while changed:
            changed = False
            for a, kids in children.items():
                want = min(layer[c] for c in kids) - 1
                if layer[a] < want:
                    layer[a] = want
                    changed = True
        return layer


def pipeline_graph(ds: Any) -> PipelineGraph:
    """Returns the stage graph ending at ``ds`` (shared stages appear once)."""
    from grain_core.dataset.base import IterDataset, MapDataset
    from grain_core.dataset.describe import stage_label

    index: dict[int, int] = {}
    labels: list[str] = []
    kinds: list[str] = []
    edges: list[tuple[int, int]] = []

    def visit(d: Any) -> int:
        if id(d) in index:
            return index[id(d)]
        parent_ids = [visit(p) for p in (getattr(d, "parents", ()) or ())]
        i = len(labels)
        index[id(d)] = i
        try:
            labels.append(stage_label(d))
        except Exception:
            labels.append(type(d).__name__)
        kinds.append("map" if isinstance(d, MapDataset) else "iter" if isinstance(d, IterDataset) else "other")
        edges.extend((p, i) for p in parent_ids)
        return i

    out = visit(ds)
    return PipelineGraph(labels, kinds, edges, out)


def _to_text(g: PipelineGraph) -> str:
    lines: list[str] = []
    parents: dict[int, list[int]] = {}
    for a, b in g.edges:
        parents.setdefault(b, []).append(a)

    def walk(i: int, indent: int) -> None:
        ps = parents.get(i, [])
        if len(ps) == 1:
            walk(ps[0], indent)
        else:
            for p in ps:
                walk(p, indent + 2)
        lines.append(" " * indent + ("└ " if len(ps) > 1 else "") + g.labels[i])

    walk(g.output, 0)
    return "\n".join(lines)


def _to_mermaid(g: PipelineGraph) -> str:
    lines = ["flowchart TD"]
    for i, label in enumerate(g.labels):
        text = label.replace('"', "#quot;")
        shape = ('[("', '")]') if not any(b == i for _, b in g.edges) else ('["', '"]')
        lines.append(f"    n{i}{shape[0]}{text}{shape[1]}")
    for a, b in g.edges:
        lines.append(f"    n{a} --> n{b}")
    return "\n".join(lines)


def _to_dot(g: PipelineGraph) -> str:
    lines = ["digraph pipeline {", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
    for i, label in enumerate(g.labels):
        text = label.replace("\\", "\\\\").replace('"', '\\"')
        style = ', style=filled, fillcolor="#e8f0fe"' if g.kinds[i] == "map" else ""
        lines.append(f'  n{i} [label="{text}"{style}];')
    for a, b in g.edges:
        lines.append(f"  n{a} -> n{b};")
    lines.append("}")
    return "\n".join(lines)


_CHAR_W = 7.2
_BOX_H = 30
_GAP_X = 30
_GAP_Y = 40
_MAX_LABEL = 60


def _short(label: str, ellipsis: str = "…") -> str:
    if len(label) <= _MAX_LABEL:
        return label
    return label[: _MAX_LABEL - len(ellipsis)] + ellipsis


@dataclasses.dataclass
class Box:
    """One stage's box: its node index, full and shown label, kind and geometry (top-left x, y)."""

    index: int
    label: str
    text: str
    kind: str
    x: float
    y: float
    width: float
    height: float

    @property
    def center_x(self) -> float:
        return self.x + self.width / 2


@dataclasses.dataclass
class Layout:
    """A layered drawing: sources in the top row, the output at the bottom; ``edges`` are
    ``(x1, y1, x2, y2)`` lines from the bottom of a parent's box to the top of its child's."""

    boxes: list[Box]
    edges: list[tuple[float, float, float, float]]
    width: float
    height: float


def _layout(
    g: PipelineGraph,
    text_width: Callable[[str], float] = lambda t: len(t) * _CHAR_W,
    ellipsis: str = "…",
) -> Layout:
    layer = g.layers()
    rows: dict[int, list[int]] = {}
    for i, lay in enumerate(layer):
        rows.setdefault(lay, []).append(i)
    texts = [_short(lbl, ellipsis) for lbl in g.labels]
    widths = [text_width(t) + 20 for t in texts]
    row_w = {r: sum(widths[i] for i in nodes) + _GAP_X * (len(nodes) - 1) for r, nodes in rows.items()}
    total_w = max(row_w.values()) + 2 * _GAP_X
    pos: dict[int, tuple[float, float]] = {}
    for r, nodes in sorted(rows.items()):
        x = (total_w - row_w[r]) / 2
        y = _GAP_Y / 2 + r * (_BOX_H + _GAP_Y)
        for i in nodes:
            pos[i] = (x, y)
            x += widths[i] + _GAP_X
    total_h = _GAP_Y / 2 + len(rows) * (_BOX_H + _GAP_Y) - _GAP_Y / 2
    boxes = [
        Box(i, g.labels[i], texts[i], g.kinds[i], pos[i][0], pos[i][1], widths[i], _BOX_H)
        for i in range(len(g.labels))
    ]
    edges = [
        (boxes[a].center_x, boxes[a].y + _BOX_H, boxes[b].center_x, boxes[b].y) for a, b in g.edges
    ]
    return Layout(boxes, edges, total_w, total_h)


def pipeline_layout(ds: Any) -> Layout:
    """The layered layout the SVG and PNG pictures of ``ds`` are drawn from."""
    return _layout(pipeline_graph(ds))


_FILLS = {"map": "#e8f0fe", "iter": "#fef7e0", "other": "#eeeeee"}


def _to_svg(g: PipelineGraph) -> str:
    lay = _layout(g)
    total_w, total_h = lay.width, lay.height
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="monospace" font-size="12">',
        "<title>grain_core pipeline</title>",
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"8\" "
        'markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/>'
        "</marker></defs>",
    ]
    for x1, y1, x2, y2 in lay.edges:
        out.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#555" '
            'marker-end="url(#arrow)"/>'
        )
    for b in lay.boxes:
        out.append(
            f'<g class="stage {b.kind}"><title>{html.escape(b.label)}</title>'
            f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.width:.1f}" height="{b.height}" rx="5" '
            f'fill="{_FILLS[b.kind]}" stroke="#333"/>'
            f'<text x="{b.center_x:.1f}" y="{b.y + b.height / 2 + 4:.1f}" text-anchor="middle">'
            f"{html.escape(b.text)}</text></g>"
        )
    out.append("</svg>")
    return "\n".join(out)


_PNG_SCALE = 2  # pixels per layout unit: a sharper picture


def _png_font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # a scalable font (Pillow >= 10.1 with FreeType)
    except (TypeError, ValueError, OSError, ImportError):
        return ImageFont.load_default()  # the small bitmap font


def _png_image(g: PipelineGraph) -> tuple[Any, Layout]:
    """Draws the layout of ``g`` with Pillow; returns the image and the layout drawn."""
    try:
        from PIL import Image, ImageDraw
    except ImportError as e:
        raise ImportError(
            "Writing a PNG picture needs Pillow, an optional dependency: "
            "pip install grain-core-kernel[viz]   (or write an .svg file, which needs nothing)"
        ) from e
    from PIL import ImageFont

    k = _PNG_SCALE
    font = _png_font(12 * k)
    bitmap = isinstance(font, ImageFont.ImageFont)
    if bitmap:  # a fixed-size font: draw at layout scale so the text fits its boxes
        k = 1

    def safe(t: str) -> str:  # the bitmap font has Latin-1 glyphs only
        return t.encode("latin-1", "replace").decode("latin-1") if bitmap else t

    def width(t: str) -> float:
        try:
            return float(font.getlength(safe(t))) / k
        except Exception:
            return len(t) * _CHAR_W

    lay = _layout(g, width, ellipsis="..." if bitmap else "…")
    img = Image.new("RGB", (math.ceil(lay.width * k), math.ceil(lay.height * k)), "white")
    draw = ImageDraw.Draw(img)
    for x1, y1, x2, y2 in lay.edges:
        x1, y1, x2, y2 = x1 * k, y1 * k, x2 * k, y2 * k
        draw.line([(x1, y1), (x2, y2)], fill="#555555", width=k)
        d = math.hypot(x2 - x1, y2 - y1) or 1.0
        ux, uy = (x2 - x1) / d, (y2 - y1) / d
        size = 8 * k
        bx, by = x2 - ux * size, y2 - uy * size
        draw.polygon(
            [(x2, y2), (bx - uy * size / 2, by + ux * size / 2), (bx + uy * size / 2, by - ux * size / 2)],
            fill="#555555",
        )
    for b in lay.boxes:
        box = [b.x * k, b.y * k, (b.x + b.width) * k, (b.y + b.height) * k]
        draw.rounded_rectangle(box, radius=5 * k, fill=_FILLS[b.kind], outline="#333333", width=k)
        text = safe(b.text)
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        cx, cy = b.center_x * k, (b.y + b.height / 2) * k
        draw.text(
            (cx - (left + right) / 2, cy - (top + bottom) / 2), text, fill="black", font=font
        )
    return img, lay


def _write_png(g: PipelineGraph, path: str) -> Layout:
    img, lay = _png_image(g)
    img.save(path, format="PNG")
    return lay


_RENDER = {"text": _to_text, "mermaid": _to_mermaid, "dot": _to_dot, "svg": _to_svg}


def visualize(ds: Any, format: str = "text", path: str | os.PathLike | None = None) -> str:
    """Returns the pipeline ending at ``ds`` as ``format`` and, with ``path``, writes a file.

    Args:
      ds: a ``MapDataset`` or ``IterDataset``.
      format: ``"text"`` (indented, one stage per line), ``"mermaid"`` (a ``flowchart``),
        ``"dot"`` (Graphviz source) or ``"svg"``.
      path: where to write. A path ending in ``.svg`` always gets an SVG drawing (laid out here,
        no graphviz needed) and one ending in ``.png`` a PNG picture of the same layout (drawn with
        Pillow: ``pip install grain-core-kernel[viz]``, else ``ImportError``); other paths get the
        ``format`` text.

    Returns:
      the graph in ``format``.
    """
    if format not in _RENDER:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}.")
    g = pipeline_graph(ds)
    result = _RENDER[format](g)
    if path is not None:
        p = os.fspath(path)
        suffix = os.path.splitext(p)[1].lower()
        if suffix == ".png":
            _write_png(g, p)
            return result
        content = _to_svg(g) if suffix == ".svg" else result
        with open(p, "w", encoding="utf-8") as f:
            f.write(content + "\n")
    return result
