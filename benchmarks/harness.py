"""Side-by-side throughput measurement of grain_core and google's grain.

A benchmark module ``benchmarks/bench_<topic>.py`` defines ``WORKLOADS: list[Workload]``. Each
workload builds the same pipeline with either library (``build(lib)`` gets the ``grain_core`` module
or the ``grain`` module) and is timed in this process, one after the other, on the same data.
``references`` time raw-library limits (e.g. the ArrayRecord reader's own batched read) for context.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable, Iterable
from typing import Any


@dataclasses.dataclass
class Workload:
    """One pipeline measured on both libraries.

    Attributes:
      name: row label.
      build: ``build(lib) -> iterable`` constructing the pipeline with ``lib`` (grain_core or grain).
      count: elements an output item stands for (e.g. ``len`` of a batch); default 1.
      unit: what is counted ("elements", "records", "rows", "tokens").
      target: the ratio the issue asks for (printed beside the measurement), or None.
      build_theirs: a different builder for grain where its API differs from ours.
      references: ``{label: fn() -> count}`` raw-library measurements timed once each.
      setup: called once before anything is timed (e.g. to write files); its result is passed to
        builders as ``build(lib, data)`` when it is not None.
      max_seconds: stop a measurement after this long and report the rate so far.
      compare: False for workloads grain has no counterpart for (only grain_core is timed).
    """

    name: str
    build: Callable[..., Iterable[Any]]
    count: Callable[[Any], int] = lambda _: 1
    unit: str = "elements"
    target: float | None = None
    build_theirs: Callable[..., Iterable[Any]] | None = None
    references: dict[str, Callable[..., int]] = dataclasses.field(default_factory=dict)
    setup: Callable[[], Any] | None = None
    max_seconds: float = 30.0
    compare: bool = True


def measure(make: Callable[[], Iterable[Any]], count: Callable[[Any], int], max_seconds: float) -> float:
    """Returns items counted per second over one pass of ``make()`` (capped at ``max_seconds``)."""
    gc.collect()
    it = iter(make())
    total = 0
    start = time.perf_counter()
    try:
        for item in it:
            total += count(item)
            if time.perf_counter() - start > max_seconds:
                break
    finally:
        close = getattr(it, "close", None)
        if close:
            close()
    return total / (time.perf_counter() - start)


def run_workloads(workloads: list[Workload], ours: Any, theirs: Any | None) -> list[dict[str, Any]]:
    """Times every workload on both libraries and returns one result dict per workload."""
    rows = []
    for w in workloads:
        data = w.setup() if w.setup else None
        args = () if data is None else (data,)
        ours_rate = measure(lambda w=w, a=args: w.build(ours, *a), w.count, w.max_seconds)
        theirs_rate = None
        if theirs is not None and w.compare:
            builder = w.build_theirs or w.build
            try:
                theirs_rate = measure(
                    lambda b=builder, a=args: b(theirs, *a), w.count, w.max_seconds
                )
            except Exception as e:  # grain lacking a feature is reported, not fatal
                print(f"  [{w.name}] grain failed: {type(e).__name__}: {e}")
        refs = {}
        for label, fn in w.references.items():
            t0 = time.perf_counter()
            n = fn(*args)
            refs[label] = n / (time.perf_counter() - t0)
        row = {
            "workload": w.name,
            "unit": w.unit,
            "grain_core": ours_rate,
            "grain": theirs_rate,
            "ratio": ours_rate / theirs_rate if theirs_rate else None,
            "target": w.target,
            "references": refs,
        }
        print(format_row(row), flush=True)
        rows.append(row)
    return rows


def format_row(row: dict[str, Any]) -> str:
    theirs = f"{row['grain']:>12,.0f}" if row["grain"] else f"{'n/a':>12}"
    ratio = f"{row['ratio']:>7.1f}x" if row["ratio"] else f"{'':>8}"
    target = f" (target {row['target']}x)" if row["target"] else ""
    refs = "".join(f"  | {k}: {v:,.0f}/s" for k, v in row["references"].items())
    floor = row["references"].get("python floor")
    if floor:
        refs += f" (grain_core at {row['grain_core'] / floor:.0%} of it)"
    return f"{row['workload']:<60} {row['grain_core']:>12,.0f} {theirs} {ratio}{target} {row['unit']}/s{refs}"
