"""``grain-core bench TARGET``: iterate a pipeline and report elements/s and bytes/s."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from grain_core.cli._target import element_nbytes, human_bytes, load_target


def run_bench(ds: Any, *, seconds: float | None, steps: int | None, progress: bool,
              with_stats: bool = False) -> dict[str, Any]:
    """Iterates ``ds`` until ``steps`` elements, ``seconds`` elapsed or the end; returns a summary."""
    if with_stats:
        from grain_core.stats import iter_with_stats

        it = iter_with_stats(ds)
    else:
        it = iter(ds)
    elements = 0
    nbytes = 0
    first_s = None
    start = time.perf_counter()
    last_print = start
    exhausted = False
    try:
        while steps is None or elements < steps:
            try:
                x = next(it)
            except StopIteration:
                exhausted = True
                break
            now = time.perf_counter()
            if first_s is None:
                first_s = now - start
            elements += 1
            nbytes += element_nbytes(x)
            if progress and now - last_print >= 0.5:
                last_print = now
                el = now - start
                sys.stderr.write(
                    f"\r{elements:,} elements  {elements / el:,.1f} elements/s  "
                    f"{human_bytes(nbytes / el)}/s  {el:.1f}s   "
                )
                sys.stderr.flush()
            if seconds is not None and now - start >= seconds:
                break
        elapsed = time.perf_counter() - start
        stats = it.stats() if with_stats else None
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    if progress:
        sys.stderr.write("\n")
    out: dict[str, Any] = {
        "elements": elements,
        "seconds": elapsed,
        "elements_per_s": elements / elapsed if elapsed > 0 else None,
        "bytes": nbytes,
        "bytes_per_s": nbytes / elapsed if elapsed > 0 else None,
        "first_element_s": first_s,
        "exhausted": exhausted,
    }
    if stats is not None:
        out["stats"] = stats.as_dict()
        out["_stats_text"] = str(stats)
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    ds = load_target(args.target)
    seconds = args.seconds
    if seconds is None and args.steps is None:
        seconds = 10.0
    result = run_bench(ds, seconds=seconds, steps=args.steps,
                       progress=not args.json and not args.quiet, with_stats=args.stats)
    text = result.pop("_stats_text", None)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    eps = result["elements_per_s"] or 0.0
    bps = result["bytes_per_s"] or 0.0
    print(f"target:          {args.target}")
    print(f"elements:        {result['elements']:,}" + ("  (dataset exhausted)" if result["exhausted"] else ""))
    print(f"time:            {result['seconds']:.3f} s")
    print(f"elements/s:      {eps:,.1f}")
    print(f"bytes/s:         {human_bytes(bps)}/s  ({human_bytes(result['bytes'])} in total, estimated)")
    if result["first_element_s"] is not None:
        print(f"first element:   {result['first_element_s']:.3f} s")
    if text:
        print(text)
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
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_bench)
