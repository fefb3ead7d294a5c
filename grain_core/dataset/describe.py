"""Readable text for a pipeline: one line per stage, sources first, branches indented."""

from __future__ import annotations

from typing import Any


def stage_label(ds: Any) -> str:
    """One stage's label: its ``__str__`` if the class defines one, else its class name."""
    if type(ds).__str__ is not object.__str__ and type(ds).__str__ is not type(ds).__repr__:
        return str(ds)
    fields = tuple(ds.fingerprint_fields().values()) if hasattr(ds, "fingerprint_fields") else ()
    inner = ", ".join(map(repr, fields))
    return f"{type(ds).__name__}({inner})"


def describe(ds: Any) -> str:
    """Returns the pipeline ending at ``ds`` as indented text, one stage per line."""
    lines: list[str] = []

    def walk(d: Any, indent: int) -> None:
        parents = list(getattr(d, "parents", ()))
        if len(parents) == 1:
            walk(parents[0], indent)
        elif parents:
            for p in parents:
                walk(p, indent + 2)
        lines.append(" " * indent + ("└ " if len(parents) > 1 else "") + stage_label(d))

    walk(ds, 0)
    return "\n".join(lines)
