"""The state contract: what ``DatasetIterator.get_state()`` returns and how ``set_state`` checks it.

Rules (see ``docs/contracts.md``):

* A state is a small JSON-serialisable ``dict`` of positions: ints, floats, strings, bools, None,
  lists and dicts of those. Never data, never pickles.
* Every state made by :func:`make_state` names the iterator ``kind`` that made it, plus whatever the
  iterator needs to refuse a state from another pipeline (lengths, seeds, a fingerprint), plus the
  states of its parents.
* ``set_state(s)`` on a fresh iterator of the same pipeline continues with exactly the elements the
  original would have produced. A state from a different pipeline raises :class:`StateMismatchError`
  before anything is changed.

Plugins build and check their iterator states with these functions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "STATE_FORMAT_VERSION",
    "StateMismatchError",
    "check_json_state",
    "expect_state",
    "fingerprint",
    "make_state",
]

STATE_FORMAT_VERSION = 1


class StateMismatchError(ValueError):
    """A state does not fit the iterator it was given to (another pipeline, or another version)."""


def fingerprint(*parts: Any) -> str:
    """Returns a short stable hex digest of ``parts`` (anything ``repr`` renders deterministically)."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def make_state(kind: str, **fields: Any) -> dict[str, Any]:
    """Returns ``{"kind": kind, **fields}``: the shape every grain_core iterator state has."""
    return {"kind": kind, **fields}


def expect_state(
    state: Any, kind: str, keys: Iterable[str] = (), **must_equal: Any
) -> Mapping[str, Any]:
    """Checks that ``state`` was made by an iterator of ``kind`` with ``keys`` and equal fields.

    ``must_equal`` names fields whose value in the state has to equal the iterator's own (a length,
    a seed, a fingerprint): a difference means the state belongs to another pipeline.

    Returns the state. Raises :class:`StateMismatchError` saying what differs, or ``TypeError`` for a
    non-dict.
    """
    if not isinstance(state, Mapping):
        raise TypeError(
            f"set_state expects the dict returned by get_state(), got {type(state).__name__}."
        )
    got = state.get("kind")
    if got != kind:
        raise StateMismatchError(
            f"This state was saved by a {got!r} iterator, but it is being restored into a {kind!r} "
            "iterator: the state comes from a different pipeline. Restore it into an iterator of "
            "the pipeline that saved it."
        )
    missing = [k for k in keys if k not in state]
    if missing:
        raise StateMismatchError(
            f"The {kind!r} state lacks {missing}: it was written by another version of this "
            "iterator or was altered."
        )
    for key, expected in must_equal.items():
        if state.get(key) != expected:
            raise StateMismatchError(
                f"The {kind!r} state has {key}={state.get(key)!r}, but this pipeline has "
                f"{key}={expected!r}: the state comes from a different pipeline (other data, "
                "seed or structure). Restore it into the pipeline that saved it."
            )
    return state


def check_json_state(state: Any) -> None:
    """Raises ``TypeError`` naming the first value in ``state`` that JSON cannot hold exactly."""
    try:
        json.dumps(state, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"iterator state is not JSON-serialisable: {e}") from e
