"""Grain's execution summary of an iterator: ``get_execution_summary`` and ``pretty_format_summary``.

Public code imports these from Grain's private modules (``grain._src.python.dataset.dataset`` and
``...dataset.stats``) to print a pipeline's per-stage statistics; the private-path table maps them
here. Contract:

* :func:`get_execution_summary` ``(it)`` returns an :class:`ExecutionSummary`: ``nodes`` maps a
  node id to an :class:`ExecutionSummaryNode` with the fields of Grain's
  ``ExecutionSummary.Node`` (``id``, ``name``, ``inputs``, ``wait_time_ratio``,
  ``total_processing_time_ns``, ``min/max_processing_time_ns``, ``num_produced_elements``,
  ``output_spec``, ``is_output``, ``is_prefetch``, ``bytes_consumed``, ``bytes_produced``). Node 0
  is the output stage; ids number the stages depth first, parents after their child, as Grain's.
  ``wait_time_ratio`` is computed as Grain computes it (a stage's share of the processing time of
  the stages down to the nearest prefetch; a prefetch's share is handed to the stages it runs).

  - For an iterator made while ``py_debug_mode`` is on, or whose pipeline's options ask for
    ``STAGE_TIMING`` (``iter(ds)`` is then :func:`grain_core.stats.iter_with_stats`, see
    :mod:`grain_core.debug`), the nodes are that iterator's stages as
    :mod:`grain_core.stats` measured them, the stages run in ``mp_prefetch`` workers included
    (their counts summed over the workers). ``total_processing_time_ns`` is the stage's self time;
    grain_core keeps no per-element extremes, so ``min`` and ``max`` are the mean per element.
    When the output iterator itself records through ``self._stats`` (a custom stage; see
    :mod:`grain_core.dataset.grain_stats`), node 0's ``output_spec`` and bytes are its records;
    the other nodes' are empty (``get_execution_summary`` of an inner custom iterator gives its
    own records).
  - Otherwise, when the iterator's ``_stats`` records (an iterator inside such a pipeline), the
    nodes are the tree of ``_stats`` objects, with what each stage recorded through them (stages
    of grain_core record nothing there).
  - Otherwise ``ValueError`` with Grain's message.

* :func:`pretty_format_summary` ``(summary)`` is a text table of the nodes with Grain's columns
  (``id``, ``name``, ``inputs``, ``percent wait time``, processing times, ``num produced elements``,
  ``memory usage``), values formatted as Grain formats them (``N/A`` where Grain prints it). The
  table's borders and wrapping are grain_core's own.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from grain_core.dataset.grain_stats import ExecutionStats

__all__ = [
    "ExecutionSummary",
    "ExecutionSummaryNode",
    "get_execution_summary",
    "pretty_format_summary",
]


@dataclasses.dataclass
class ExecutionSummaryNode:
    """One stage of an :class:`ExecutionSummary` (the fields of Grain's proto message)."""

    id: int = 0
    name: str = ""
    inputs: list[int] = dataclasses.field(default_factory=list)
    wait_time_ratio: float = 0.0
    total_processing_time_ns: int = 0
    min_processing_time_ns: int = 0
    max_processing_time_ns: int = 0
    num_produced_elements: int = 0
    output_spec: str = ""
    is_output: bool = False
    is_prefetch: bool = False
    bytes_consumed: int = 0
    bytes_produced: int = 0


@dataclasses.dataclass
class ExecutionSummary:
    """Grain's ``ExecutionSummary``: ``nodes`` by id, node 0 the output stage."""

    nodes: dict[int, ExecutionSummaryNode] = dataclasses.field(default_factory=dict)


_NOT_COLLECTING = (
    "Set `grain_py_debug_mode` or set `execution_tracking_mode` in grain"
    " options to `STAGE_TIMING` to enable execution statistics collection."
)


def _from_recorded(stats: ExecutionStats, node: ExecutionSummaryNode) -> None:
    node.output_spec = "" if stats.output_spec is None else str(stats.output_spec)
    node.bytes_consumed = stats.bytes_consumed
    node.bytes_produced = stats.bytes_produced


def _from_stats_tree(root: ExecutionStats) -> ExecutionSummary:
    summary = ExecutionSummary()
    counter = [0]

    def visit(stats: Any) -> int:
        node_id = counter[0]
        counter[0] += 1
        node = ExecutionSummaryNode(id=node_id, name=getattr(stats, "name", type(stats).__name__))
        summary.nodes[node_id] = node
        if isinstance(stats, ExecutionStats):
            node.is_output, node.is_prefetch = stats.is_output, stats.is_prefetch
            node.num_produced_elements = stats.num_produced_elements
            node.total_processing_time_ns = stats.total_processing_time_ns
            if stats.num_produced_elements:
                node.min_processing_time_ns = stats.min_processing_time_ns
                node.max_processing_time_ns = stats.max_processing_time_ns
            else:
                node.min_processing_time_ns = sys.maxsize
            _from_recorded(stats, node)
            for parent in stats.parents:
                node.inputs.append(visit(parent))
        return node_id

    visit(root)
    summary.nodes[0].is_output = True
    return summary


def _from_measured(it: Any, snapshot: Any) -> ExecutionSummary:
    summary = ExecutionSummary()
    path: list[int] = []  # node ids of the current stage's ancestors, by depth
    for node_id, stage in enumerate(snapshot.stages):
        del path[stage.depth:]
        elements = int(stage.elements)
        total = int(round(stage.self_s * 1e9))
        mean = total // elements if elements else 0
        node = ExecutionSummaryNode(
            id=node_id,
            name=stage.name,
            total_processing_time_ns=total,
            min_processing_time_ns=mean,
            max_processing_time_ns=mean,
            num_produced_elements=elements,
            is_output=node_id == 0,
            is_prefetch=stage.buffer_fill is not None,
        )
        if path:
            summary.nodes[path[-1]].inputs.append(node_id)
        summary.nodes[node_id] = node
        path.append(node_id)
    own = it.__dict__.get("_grain_stats")
    if isinstance(own, ExecutionStats) and summary.nodes:
        _from_recorded(own, summary.nodes[0])
    return summary


def _before_prefetch(node_id: int, summary: ExecutionSummary) -> list[int]:
    found, todo = [], [node_id]
    while todo:
        current = todo.pop()
        found.append(current)
        if not summary.nodes[current].is_prefetch:
            todo.extend(summary.nodes[current].inputs)
    return found


def _wait_ratio(summary: ExecutionSummary, node_id: int, aggregated: int, factor: float) -> None:
    if aggregated == 0:
        return
    node = summary.nodes[node_id]
    node.wait_time_ratio = round(factor * node.total_processing_time_ns / aggregated, 4)
    for input_id in node.inputs:
        if node.is_prefetch:
            factor = node.wait_time_ratio
            aggregated = sum(
                summary.nodes[i].total_processing_time_ns
                for i in _before_prefetch(input_id, summary)
            )
            node.wait_time_ratio = 0
        _wait_ratio(summary, input_id, aggregated, factor)


def _populate_wait_time_ratio(summary: ExecutionSummary) -> None:
    if not summary.nodes:
        return
    aggregated = sum(
        summary.nodes[i].total_processing_time_ns for i in _before_prefetch(0, summary)
    )
    _wait_ratio(summary, 0, aggregated, 1.0)


def get_execution_summary(it: Any) -> ExecutionSummary:
    """The per-stage statistics of iterator ``it`` (module docstring)."""
    collector = getattr(it, "_grain_core_stats", None)
    if collector is not None:
        summary = _from_measured(it, collector.snapshot())
    else:
        stats = getattr(it, "_stats", None)
        if not isinstance(stats, ExecutionStats):
            raise ValueError(_NOT_COLLECTING)
        summary = _from_stats_tree(stats)
    _populate_wait_time_ratio(summary)
    return summary


# --- pretty_format_summary ------------------------------------------------------------------------

_TIME_COLUMNS = (
    "min_processing_time_ns",
    "max_processing_time_ns",
    "avg processing time",
    "total_processing_time_ns",
)
_COLUMNS = (
    ("id", "id"),
    ("name", "name"),
    ("inputs", "inputs"),
    ("wait_time_ratio", "percent wait time"),
    ("total_processing_time_ns", "total processing time"),
    ("min_processing_time_ns", "min processing time"),
    ("max_processing_time_ns", "max processing time"),
    ("avg processing time", "avg processing time"),
    ("num_produced_elements", "num produced elements"),
    ("memory usage", "memory usage"),
)
_MAX_WIDTH = 30


def _ns(value: int) -> str:
    if value < 1000:
        return f"{value}ns"
    if value < 1_000_000:
        return f"{value / 1000:.2f}us"
    if value < 1_000_000_000:
        return f"{value / 1_000_000:.2f}ms"
    return f"{value / 1_000_000_000:.2f}s"


def _bytes(value: int) -> str:
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value} bytes"


def _cell(column: str, node: ExecutionSummaryNode) -> str:
    if column == "wait_time_ratio" and node.is_prefetch:
        return "N/A"
    if column in _TIME_COLUMNS and node.total_processing_time_ns == 0:
        return "N/A"
    if column == "avg processing time":
        elements = node.num_produced_elements
        return _ns(int(node.total_processing_time_ns / elements) if elements else 0)
    if column == "memory usage":
        used = max(0, node.bytes_consumed - node.bytes_produced) if node.is_prefetch else 0
        return _bytes(used)
    value = getattr(node, column)
    if column == "wait_time_ratio":
        return f"{value * 100:.2f}%"
    if column in _TIME_COLUMNS:
        return _ns(value)
    return str(value)


def pretty_format_summary(summary: ExecutionSummary) -> str:
    """``summary`` as a text table, one row per node, highest id first as Grain prints it."""
    rows = [[title for _, title in _COLUMNS]]
    for node_id in sorted(summary.nodes, reverse=True):
        rows.append([_cell(column, summary.nodes[node_id]) for column, _ in _COLUMNS])
    rows = [[c if len(c) <= _MAX_WIDTH else c[: _MAX_WIDTH - 3] + "..." for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    lines = [rule]
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            lines.append(rule)
    lines.append(rule)
    return "\n".join(lines) + "\n"
