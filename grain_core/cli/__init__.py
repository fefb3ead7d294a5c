"""The ``grain-core`` command line (``python -m grain_core``).

Commands: ``plugins`` (installed plugins; ``--json``), ``bench TARGET`` (throughput),
``inspect TARGET`` (stages, providers, element spec, per-stage timings), ``stats TARGET``
(per-stage execution statistics), ``visualize TARGET`` (text, Mermaid, DOT, SVG, PNG) and
``new-plugin NAME`` (a plugin skeleton); ``--version`` prints the kernel distribution's version.
TARGET is ``path/to/file.py:name`` or ``module:name``: a dataset or a zero-argument callable
returning one. Text output is at most 100 columns wide; progress of work longer than a second goes
to stderr (a bar on a terminal, plain lines otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from grain_core.cli._about import KERNEL_DISTRIBUTION, kernel_version
from grain_core.cli._console import wrap
from grain_core.cli._target import TargetError

__all__ = ["build_parser", "main"]


def _plugins(args: argparse.Namespace) -> int:
    from grain_core.plugins import list_plugins

    plugins = list_plugins()
    if args.json:
        print(json.dumps([p.as_dict() for p in plugins], indent=2))
        return 0
    if not plugins:
        print("No grain_core plugins installed.")
        return 0
    for p in plugins:
        head = f"{p.name}: {p.distribution or '(registered in-process)'} {p.version}".rstrip()
        lines = wrap(f"{head} [{p.status}]", "", "    ")
        if p.reason:
            lines += wrap(f"why: {p.reason}", "  ", "    ")
        if p.entry_point:
            lines += wrap(f"entry point: {p.entry_point}", "  ", "    ")
        if p.provides:
            lines += wrap(f"provides: {', '.join(p.provides)}", "  ", "    ")
        if p.error:
            lines += wrap(f"error: {p.error}", "  ", "    ")
        print("\n".join(lines))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from grain_core.cli import bench, inspect, new_plugin, stats, visualize

    parser = argparse.ArgumentParser(prog="grain-core", description="grain_core command line.")
    parser.add_argument(
        "--version", action="version", version=f"{KERNEL_DISTRIBUTION} {kernel_version()}"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="list installed plugins, their versions and what they provide")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_plugins)
    bench.add_parser(sub)
    inspect.add_parser(sub)
    stats.add_parser(sub)
    visualize.add_parser(sub)
    new_plugin.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except (TargetError, ImportError) as e:
        print(f"grain-core: error: {e}", file=sys.stderr)
        code = 2
    sys.exit(code)
