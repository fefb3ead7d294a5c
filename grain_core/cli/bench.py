"""``grain-core bench TARGET``: iterate a pipeline and report elements/s and bytes/s."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from grain_core.cli._console import Progress, console, print_stats, wrap
from grain_core.cli._target import human_bytes, load_target
from grain_core.tree import nbytes


def run_bench(ds: Any, *, seconds: float | None, steps: int | None, progress: bool,
              with_stats: bool = False, label: str = "bench") -> dict[str, Any]:
    """Iterates ``ds`` until ``steps`` elements, ``seconds`` elapsed or the end; returns a summary
    (JSON-ready, plus ``_first``: the first element, and ``_stats``: the
    :class:`~grain_core.stats.PipelineStats` with ``with_stats``). Progress goes to stderr
    (:class:`grain_core.cli._console.Progress`)."""
    if with_stats:
        from grain_core.stats import iter_with_stats

        it = iter_with_stats(ds)
    else:
        it = iter(ds)
    elements = 0
    total_bytes = 0
    first_s = None
    first: Any = None
    stats = None
    start = time.perf_counter()
    exhausted = False
    try:
        with Progress(label, total=steps, seconds=seconds, enabled=progress) as bar:
            while steps is None or elements < steps:
                try:
                    x = next(it)
                except StopIteration:
                    exhausted = True
                    break
                now = time.perf_counter()
                if first_s is None:
                    first_s = now - start
                    first = x
                elements += 1
                total_bytes += nbytes(x)
                bar.update(elements, total_bytes)
                if seconds is not None and now - start >= seconds:
                    break
        elapsed = time.perf_counter() - start
        stats = it.stats() if with_stats else None
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    return {
        "elements": elements,
        "seconds": elapsed,
        "elements_per_s": elements / elapsed if elapsed > 0 else None,
        "bytes": total_bytes,
        "bytes_per_s": total_bytes / elapsed if elapsed > 0 else None,
        "first_element_s": first_s,
        "exhausted": exhausted,
        **({"stats": stats.as_dict()} if stats is not None else {}),
        "_first": first,
        "_stats": stats,
    }


def cmd_bench(args: argparse.Namespace) -> int:
    ds = load_target(args.target)
    seconds = args.seconds
    if seconds is None and args.steps is None:
        seconds = 10.0
    result = run_bench(ds, seconds=seconds, steps=args.steps,
                       progress=not args.json and not args.quiet, with_stats=args.stats)
    stats = result.pop("_stats")
    result.pop("_first")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    eps = result["elements_per_s"] or 0.0
    bps = result["bytes_per_s"] or 0.0
    out = console()
    rows = [
        ("target", args.target),
        ("elements", f"{result['elements']:,}" + ("  (dataset exhausted)" if result["exhausted"] else "")),
        ("time", f"{result['seconds']:.3f} s"),
        ("elements/s", f"{eps:,.1f}"),
        ("bytes/s", f"{human_bytes(bps)}/s  ({human_bytes(result['bytes'])} in total, estimated)"),
    ]
    if result["first_element_s"] is not None:
        rows.append(("first element", f"{result['first_element_s']:.3f} s"))
    for key, value in rows:
        for line in wrap(value, f"{key + ':':<17}", " " * 17, out.width):
            out.print(line, markup=False)
    if stats is not None:
        out.print()
        print_stats(stats, out)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="iterate a pipeline and report elements/s and bytes/s",
                       description="Iterates TARGET (file.py:name or module:name: a dataset or a "
                       "zero-argument callable returning one) and reports throughput.")
    p.add_argument("target")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--seconds", type=float, help="stop after this many seconds (default 10)")
    g.add_argument("--steps", type=int, help="stop after this many elements")
    p.add_argument("--stats", action="store_true", help="also collect and print per-stage statistics")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_bench)
