"""The ``grain-core`` command line: ``plugins`` lists installed plugins (``--json`` for machines)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


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
        print(f"{head} [{p.status}]")
        if p.entry_point:
            print(f"  entry point: {p.entry_point}")
        if p.provides:
            print(f"  provides: {', '.join(p.provides)}")
        if p.error:
            print(f"  error: {p.error}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grain-core", description="grain_core command line.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="list installed plugins, their versions and what they provide")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_plugins)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    sys.exit(args.func(args))
