"""Runs every ``benchmarks/bench_*.py`` workload on grain_core and google's grain, printing per
workload both rates and their ratio, then each module's ``REPORTS`` (functions printing measurements
that are not rates, e.g. checkpoint latencies). Usage: ``python benchmarks/run.py [-k SUBSTRING] [--json OUT]``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from harness import run_workloads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-k", default="", help="only workloads whose name contains this")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    import grain_core

    try:
        import grain
        from absl import flags

        if not flags.FLAGS.is_parsed():  # grain's worker processes read absl flags
            flags.FLAGS.mark_as_parsed()
    except ImportError:
        grain = None
        print("google's grain is not installed: only grain_core rates are shown.")

    print(f"{'workload':<60} {'grain_core':>12} {'grain':>12} {'ratio':>8}")
    results = []
    for path in sorted(HERE.glob("bench_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module  # so dataclasses and pickling find the module
        spec.loader.exec_module(module)
        workloads = [w for w in module.WORKLOADS if args.k in w.name]
        reports = [r for r in getattr(module, "REPORTS", ()) if args.k in r.__name__ or not args.k]
        if workloads or reports:
            print(f"--- {path.stem}")
        if workloads:
            results += run_workloads(workloads, grain_core, grain)
        for report in reports:
            report()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
