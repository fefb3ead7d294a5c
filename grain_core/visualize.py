"""Pictures of a pipeline: text, Mermaid, Graphviz DOT, or an SVG file drawn without graphviz.

``grain_core.experimental.visualize(ds)`` walks the stages from the sources to ``ds``; stages with
several parents (mixes, zips, interleaves) become branches. PNG is not supported: write SVG and
convert it with any tool if you need a raster image.
"""

from __future__ import annotations

import dataclasses
import html
import os
from typing import Any

__all__ = ["PipelineGraph", "pipeline_graph", "visualize"]

FORMATS = ("text", "mermaid", "dot", "svg")


@dataclasses.dataclass
class PipelineGraph:
    """Stages as nodes (sources first) and ``(parent, child)`` edges between their indices."""

    labels: list[str]
    kinds: list[str]  # "map" (MapDataset), "iter" (IterDataset) or "other"
    edges: list[tuple[int, int]]
    output: int

    def layers(self) -> list[int]:
        """Each node's layer: the longest path from a source."""
        layer = [0] * len(self.labels)
        changed = True
        while changed:
            changed = False
            for a, b in self.edges:
                if layer[b] < layer[a] + 1:
                    layer[b] = layer[a] + 1
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


def _short(label: str) -> str:
    return label if len(label) <= _MAX_LABEL else label[: _MAX_LABEL - 1] + "…"


def _to_svg(g: PipelineGraph) -> str:
    layer = g.layers()
    rows: dict[int, list[int]] = {}
    for i, lay in enumerate(layer):
        rows.setdefault(lay, []).append(i)
    widths = [len(_short(lbl)) * _CHAR_W + 20 for lbl in g.labels]
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
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="monospace" font-size="12">',
        "<title>grain_core pipeline</title>",
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"8\" "
        'markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/>'
        "</marker></defs>",
    ]
    for a, b in g.edges:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        out.append(
            f'<line x1="{xa + widths[a] / 2:.1f}" y1="{ya + _BOX_H:.1f}" x2="{xb + widths[b] / 2:.1f}" '
            f'y2="{yb:.1f}" stroke="#555" marker-end="url(#arrow)"/>'
        )
    fills = {"map": "#e8f0fe", "iter": "#fef7e0", "other": "#eeeeee"}
    for i, label in enumerate(g.labels):
        x, y = pos[i]
        out.append(
            f'<g class="stage {g.kinds[i]}"><title>{html.escape(label)}</title>'
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{widths[i]:.1f}" height="{_BOX_H}" rx="5" '
            f'fill="{fills[g.kinds[i]]}" stroke="#333"/>'
            f'<text x="{x + widths[i] / 2:.1f}" y="{y + _BOX_H / 2 + 4:.1f}" text-anchor="middle">'
            f"{html.escape(_short(label))}</text></g>"
        )
    out.append("</svg>")
    return "\n".join(out)


_RENDER = {"text": _to_text, "mermaid": _to_mermaid, "dot": _to_dot, "svg": _to_svg}


def visualize(ds: Any, format: str = "text", path: str | os.PathLike | None = None) -> str:
    """Returns the pipeline ending at ``ds`` as ``format`` and, with ``path``, writes a file.

    Args:
      ds: a ``MapDataset`` or ``IterDataset``.
      format: ``"text"`` (indented, one stage per line), ``"mermaid"`` (a ``flowchart``),
        ``"dot"`` (Graphviz source) or ``"svg"``.
      path: where to write. A path ending in ``.svg`` always gets an SVG drawing (laid out here,
        no graphviz needed); other paths get the ``format`` text. ``.png`` is not supported.

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
            raise ValueError(
                "PNG output is not supported (no pure-Python renderer is bundled); write an .svg "
                "file and convert it, or render the DOT text with graphviz."
            )
        content = _to_svg(g) if suffix == ".svg" else result
        with open(p, "w", encoding="utf-8") as f:
            f.write(content + "\n")
    return result
