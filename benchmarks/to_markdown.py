"""Prints the rows of a ``benchmarks/run.py --json OUT`` file as the Markdown table of
``docs/performance.md`` (so the page's figures are copied from a run's output, not retyped).
Usage: ``python benchmarks/to_markdown.py OUT.json``."""

from __future__ import annotations

import json
import sys


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _references(row: dict) -> str:
    refs = row.get("references") or {}
    parts = []
    for label, rate in refs.items():
        share = f" (grain_core at {row['grain_core'] / rate:.0%})" if "floor" in label else ""
        parts.append(f"{label}: {rate:,.0f}/s{share}")
    return "; ".join(parts)


def main(path: str) -> None:
    rows = json.loads(open(path).read())
    print("| workload | grain_core | grain | ratio | target | unit | raw-library reference |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    for r in rows:
        ratio = f"{r['ratio']:.1f}x" if r.get("ratio") else ""
        target = f"{r['target']:g}x" if r.get("target") else ""
        print(
            f"| {r['workload']} | {_rate(r['grain_core'])} | {_rate(r.get('grain'))} | {ratio} "
            f"| {target} | {r['unit']}/s | {_references(r)} |"
        )


if __name__ == "__main__":
    main(sys.argv[1])
