"""``grain-core visualize TARGET``: the pipeline as text, Mermaid, DOT or an SVG/PNG picture
(:func:`grain_core.visualize.visualize`)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from grain_core.cli._target import TargetError, load_target


def cmd_visualize(args: argparse.Namespace) -> int:
    from grain_core.visualize import FORMATS, visualize

    if args.format not in FORMATS:  # argparse checks too; this keeps one list of formats
        raise TargetError(f"--format must be one of {FORMATS}, got {args.format!r}.")
    ds = load_target(args.target)
    if args.output is None:
        print(visualize(ds, format=args.format))
        return 0
    parent = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(parent):
        raise TargetError(f"no such directory for --output: {parent}")
    visualize(ds, format=args.format, path=args.output)
    print(f"wrote {args.output}")
    return 0


def add_parser(sub: Any) -> None:
    from grain_core.visualize import FORMATS

    p = sub.add_parser("visualize", help="draw a pipeline: text, mermaid, dot, svg or png",
                       description="Prints TARGET's pipeline graph (file.py:name or module:name) "
                       "in --format, or writes it to --output: a path ending in .svg or .png gets "
                       "a picture (PNG needs Pillow: pip install grain-core-kernel[viz]), any other "
                       "path the --format text.")
    p.add_argument("target")
    p.add_argument("--format", default="text", choices=FORMATS, help="default: text")
    p.add_argument("-o", "--output", help="write to this file instead of printing")
    p.set_defaults(func=cmd_visualize)
