"""Side-by-side throughput measurement of grain_core and google's grain.

A benchmark module ``benchmarks/bench_<topic>.py`` defines ``WORKLOADS: list[Workload]``. Each
workload builds the same pipeline with either library (``build(lib)`` gets the ``grain_core`` module
or the ``grain`` module) and is timed in this process, one after the other, on the same data.
``references`` time raw-library limits (e.g. the ArrayRecord reader's own batched read) for context.

Every rate is the median of up to :data:`PASSES` passes, taken in rounds (grain_core, grain, then
each reference, then again), so a pass slowed down by something else on a shared machine neither
makes nor breaks a ratio. A side stops repeating once its passes have taken
:data:`REPEAT_SECONDS` (a slow grain row runs once). The rows keep every pass's rate.
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
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
      references: ``{label: fn() -> count}`` raw-library measurements, timed in the same rounds as
        the two libraries.
      setup: called once before anything is timed (e.g. to write files); its result is passed to
        builders as ``build(lib, data)`` when it is not None.
      max_seconds: stop a measurement after this long and report the rate so far.
      compare: False for workloads grain has no counterpart for (only grain_core is timed).
      min_passes: grain_core and the references run at least this many passes, past
        :data:`REPEAT_SECONDS` (rows whose verdict is a share of a reference, so that a median of
        three, not one or two passes, decides it); at most :data:`PASSES` in any case.
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
    min_passes: int = 1


def scratch_dir(prefix: str) -> Path:
    """A fresh temporary directory for a workload's input files, removed when the bench exits."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


#: At most this many passes per library and reference; the row reports their median rate.
PASSES = 3
#: ... and no further pass once a side's passes have taken this long in all.
REPEAT_SECONDS = 5.0


def measure(make: Callable[[], Iterable[Any]], count: Callable[[Any], int], max_seconds: float) -> float:
    """Returns items counted per second over one pass of ``make()`` (capped at ``max_seconds``).

    The clock starts after ``make()`` (which builds the pipeline; a row may do untimed set-up
    there) and before ``iter()``: a pass includes starting the iterator, as the references' passes
    include starting their pools (grain_core's ``iter()`` starts ``mp_prefetch``'s workers at once;
    grain's starts them at the first ``next()``, so a clock started after ``iter()`` would leave
    only grain_core's start-up out)."""
    gc.collect()
    iterable = make()
    start = time.perf_counter()
    it = iter(iterable)
    total = 0
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


def _timed_reference(fn: Callable[..., int], args: tuple[Any, ...]) -> float:
    t0 = time.perf_counter()
    n = fn(*args)
    return n / (time.perf_counter() - t0)


def run_workloads(workloads: list[Workload], ours: Any, theirs: Any | None) -> list[dict[str, Any]]:
    """Times every workload on both libraries and returns one result dict per workload: the median
    rates (``grain_core``, ``grain``, each reference), their ``ratio`` and every pass's rate
    (``passes``)."""
    rows = []
    for w in workloads:
        data = w.setup() if w.setup else None
        args = () if data is None else (data,)
        sides: dict[str, Callable[[], float]] = {
            "grain_core": lambda w=w, a=args: measure(lambda: w.build(ours, *a), w.count, w.max_seconds)
        }
        if theirs is not None and w.compare:
            builder = w.build_theirs or w.build
            sides["grain"] = lambda b=builder, w=w, a=args: measure(
                lambda: b(theirs, *a), w.count, w.max_seconds
            )
        for label, fn in w.references.items():
            sides[label] = lambda fn=fn, a=args: _timed_reference(fn, a)
        passes: dict[str, list[float]] = {k: [] for k in sides}
        spent = dict.fromkeys(sides, 0.0)
        for round_ in range(PASSES):
            for side, run in sides.items():
                floor = 1 if side == "grain" else w.min_passes
                if round_ >= floor and spent[side] >= REPEAT_SECONDS:
                    continue  # (a first pass always runs)
                t0 = time.perf_counter()
                try:
                    passes[side].append(run())
                except Exception as e:  # grain lacking a feature is reported, not fatal
                    if side != "grain":
                        raise
                    print(f"  [{w.name}] grain failed: {type(e).__name__}: {e}")
                    spent[side] = float("inf")  # not tried again
                    continue
                spent[side] += time.perf_counter() - t0
        rates = {k: statistics.median(v) for k, v in passes.items() if v}
        ours_rate = rates.pop("grain_core")
        theirs_rate = rates.pop("grain", None)
        row = {
            "workload": w.name,
            "unit": w.unit,
            "grain_core": ours_rate,
            "grain": theirs_rate,
            "ratio": ours_rate / theirs_rate if theirs_rate else None,
            "target": w.target,
            "references": rates,
            "passes": passes,
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
    spread = "; ".join(
        f"{side} {min(rates):,.0f}-{max(rates):,.0f}"
        for side, rates in row.get("passes", {}).items()
        if len(rates) > 1
    )
    spread = f"  [medians of passes; {spread}]" if spread else ""
    return (
        f"{row['workload']:<60} {row['grain_core']:>12,.0f} {theirs} {ratio}{target} "
        f"{row['unit']}/s{refs}{spread}"
    )
