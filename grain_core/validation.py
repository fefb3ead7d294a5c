"""Argument checks shared by the kernel and plugins, so bad input reads the same everywhere."""

from __future__ import annotations

import operator
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

__all__ = ["ArgumentTypeError", "check_indices", "check_instance", "check_int"]


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type where Grain raises ``ValueError``: both, so code written for
    Grain (``except ValueError``) and for Python's convention (``except TypeError``) catch it."""


def check_int(value: Any, what: str, *, minimum: int | None = 0) -> int:
    """Returns ``value`` as an ``int`` if it is an integer (not a bool) of at least ``minimum``.

    Raises ``TypeError`` ("<what> must be an int, got str") or ``ValueError`` ("<what> must be
    positive, got 0" / "<what> must be non-negative, got -1" / "<what> must be >= 2, got 1": Grain's
    wording, which users match on). ``minimum=None`` skips the bound.
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got bool.")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__}.") from None
    if minimum is not None and v < minimum:
        bound = {1: "positive", 0: "non-negative"}.get(minimum, f">= {minimum}")
        raise ValueError(f"{what} must be {bound}, got {v}.")
    return v


def check_instance(
    value: T,
    kind: type | tuple[type, ...],
    what: str,
    *,
    verb: str = "must be",
    expected: str | None = None,
    hint: str = "",
) -> T:
    """Returns ``value`` if it is an instance of ``kind`` (a class or a tuple of classes).

    Else raises ``TypeError("<what> <verb> <expected>, got <type name>.<hint>")``: e.g.
    ``check_instance(x, ReadOptions, "read_options")`` says "read_options must be a ReadOptions,
    got dict."; ``check_instance(p, IterDataset, "mp_prefetch", verb="needs", expected="an
    IterDataset parent")`` says "mp_prefetch needs an IterDataset parent, got list.".
    ``expected`` defaults to the class name(s) with an article, joined by "or".
    """
    if isinstance(value, kind):
        return value
    if expected is None:
        classes = kind if isinstance(kind, tuple) else (kind,)
        expected = " or ".join(_with_article(c.__name__) for c in classes)
    raise TypeError(f"{what} {verb} {expected}, got {type(value).__name__}.{hint}")


def _with_article(name: str) -> str:
    return f"{'an' if name[:1].upper() in 'AEIOU' else 'a'} {name}"


def check_indices(record_keys: Any, length: int, owner: str) -> np.ndarray:
    """Returns ``record_keys`` as a 1-D int64 array of indices in ``[0, length)``.

    Negative keys count from the end, as for a list. This is the check a source's
    ``__getitems__`` makes before reading. Raises ``TypeError`` for a scalar, a non-1-D or
    non-integer key array (floats are refused, never truncated) and ``IndexError`` naming
    ``owner`` and ``length`` for a key out of range.
    """
    keys = np.asarray(record_keys)
    if keys.ndim != 1:
        got = "a scalar" if keys.ndim == 0 else f"shape {keys.shape}"
        raise TypeError(f"{owner}.__getitems__ expects a 1-D sequence of indices, got {got}.")
    if keys.size == 0:
        return np.zeros(0, np.int64)
    if keys.dtype.kind not in "iu":
        if keys.dtype.kind != "O":  # "O": Python ints beyond int64, or mixed objects
            raise TypeError(f"{owner} indices must be integers, got dtype {keys.dtype}.")
        keys = np.asarray([operator.index(k) for k in keys.tolist()], dtype=object)
    lo, hi = keys.min(), keys.max()
    if lo < -length or hi >= length:
        bad = hi if hi >= length else lo
        raise IndexError(f"index {int(bad)} out of range for {owner} of length {length}.")
    keys = keys.astype(np.int64, copy=False)
    return np.where(keys < 0, keys + length, keys) if lo < 0 else keys
