"""``grain-core stats TARGET``: run a pipeline with execution statistics and print them per stage
(elements, inclusive and own time, elements/s, prefetch buffer fill, stages in ``mp_prefetch``
workers); see :mod:`grain_core.stats`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from grain_core.cli._console import console, print_stats
from grain_core.cli._target import load_target


def cmd_stats(args: argparse.Namespace) -> int:
    from grain_core.cli.bench import run_bench

    ds = load_target(args.target)
    seconds = args.seconds
    if seconds is None and args.steps is None:
        seconds = 10.0
    result = run_bench(ds, seconds=seconds, steps=args.steps, progress=not args.json,
                       with_stats=True, label="stats")
    stats = result["_stats"]
    if args.json:
        print(json.dumps(stats.as_dict(), indent=2))
        return 0
    out = console()
    out.print(f"{result['elements']:,} elements in {result['seconds']:.3f} s"
              + ("  (dataset exhausted)" if result["exhausted"] else ""), markup=False)
    print_stats(stats, out)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("stats", help="run a pipeline and print per-stage execution statistics",
                       description="Iterates TARGET (file.py:name or module:name: a dataset or a "
                       "zero-argument callable returning one) with grain_core.stats and prints "
                       "each stage's elements, time and buffer fill.")
    p.add_argument("target")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--seconds", type=float, help="stop after this many seconds (default 10)")
    g.add_argument("--steps", type=int, help="stop after this many elements")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p.set_defaults(func=cmd_stats)
