"""Argument checks shared by the kernel and plugins, so bad input reads the same everywhere."""

from __future__ import annotations

import operator
from typing import Any

__all__ = ["check_int"]


def check_int(value: Any, what: str, *, minimum: int | None = 0) -> int:
    """Returns ``value`` as an ``int`` if it is an integer (not a bool) of at least ``minimum``.

    Raises ``TypeError`` ("<what> must be an int, got str") or ``ValueError`` ("<what> must be a
    positive int, got 0" / "<what> must be >= 0, got -1"). ``minimum=None`` skips the bound.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got bool.")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__}.") from None
    if minimum is not None and v < minimum:
        bound = "a positive int" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{what} must be {bound}, got {v}.")
    return v
