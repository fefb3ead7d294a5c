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

import contextlib
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "STATE_FORMAT_VERSION",
    "StateMismatchError",
    "IDENTIFYING_FIELDS",
    "check_json_state",
    "check_same_pipeline",
    "expect_state",
    "fingerprint",
    "make_state",
    "rollback_on_error",
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


#: State fields that identify a pipeline rather than a position in it (see :func:`check_same_pipeline`).
IDENTIFYING_FIELDS = frozenset(
    {
        "kind",
        "fingerprint",
        "length",
        "seed",
        "batch_size",
        "counts",
        "num_workers",
        "num_datasets",
        "cycle_length",
        "window_size",
        "path",
        "sampler",
        "worker_count",
        "version",
    }
)


def check_same_pipeline(
    expected: Any,
    state: Any,
    *,
    identifying: Iterable[str] = IDENTIFYING_FIELDS,
    where: str = "state",
) -> None:
    """Checks that ``state`` has the *shape* of ``expected``: that both come from the same pipeline.

    ``expected`` is a template, typically ``get_state()`` of a fresh, never-started iterator of the
    pipeline; ``state`` is the state about to be restored. Both are walked together:

    * dicts: every key of ``expected`` must be in ``state``; a key named in ``identifying``
      (``kind``, ``fingerprint``, ``length``, ``seed``, ``batch_size``, ``counts``, ... by default
      :data:`IDENTIFYING_FIELDS`) must have an equal value on both sides, and be present on both
      sides or neither. Other keys are positions: their values are only walked into.
    * lists of equal length are walked element by element; lists of different lengths and scalars
      outside identifying keys are positions and are not compared.
    * ``None`` on either side ("not started", "no open slot") matches anything.

    Positions (indices, counts of elements produced, skips, flags) are never compared, so any state
    the pipeline can produce passes. Keys only in ``state`` (besides identifying ones) are ignored.

    Raises :class:`StateMismatchError` naming the first differing path (e.g.
    ``state.workers[0].state.parent.fingerprint``) and both values, or ``TypeError`` when ``state``
    is not a dict while ``expected`` is. Returns ``None``; nothing is modified.
    """
    if not isinstance(identifying, (frozenset, set)):
        identifying = frozenset(identifying)
    if isinstance(expected, Mapping) and not isinstance(state, Mapping):
        raise TypeError(
            f"set_state expects the dict returned by get_state(), got {type(state).__name__}."
        )
    _walk_shape(expected, state, identifying, where)


def _mismatch(path: str, what: str) -> StateMismatchError:
    return StateMismatchError(
        f"The state does not come from this pipeline: at {path}, {what}. Restore it into an "
        "iterator of the pipeline that saved it (same data, seeds, structure and worker count)."
    )


def _walk_shape(expected: Any, state: Any, identifying: frozenset | set, path: str) -> None:
    if expected is None or state is None:
        return
    if isinstance(expected, Mapping):
        if not isinstance(state, Mapping):
            raise _mismatch(
                path, f"the state has a {type(state).__name__} where this pipeline has a dict"
            )
        if "kind" in expected and state.get("kind") != expected["kind"]:
            raise _mismatch(
                f"{path}.kind",
                f"the state was saved by a {state.get('kind')!r} iterator where this pipeline has "
                f"a {expected['kind']!r} iterator",
            )
        for key, value in expected.items():
            sub = f"{path}.{key}"
            if key not in state:
                raise _mismatch(sub, "the state lacks this field (another pipeline or version)")
            if key in identifying:
                if state[key] != value:
                    raise _mismatch(
                        sub, f"the state has {state[key]!r}, this pipeline has {value!r}"
                    )
            else:
                _walk_shape(value, state[key], identifying, sub)
        for key in state:
            if key in identifying and key not in expected:
                raise _mismatch(
                    f"{path}.{key}", "the state has this field, this pipeline's state does not"
                )
        return
    if isinstance(expected, list) and isinstance(state, list) and len(expected) == len(state):
        for i, (e, s) in enumerate(zip(expected, state)):
            _walk_shape(e, s, identifying, f"{path}[{i}]")


def check_json_state(state: Any) -> None:
    """Raises ``TypeError`` naming the first value in ``state`` that JSON cannot hold exactly."""
    try:
        json.dumps(state, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"iterator state is not JSON-serialisable: {e}") from e


@contextlib.contextmanager
def rollback_on_error(iterator: Any) -> Iterator[None]:
    """Makes the body of a ``set_state`` atomic: if it raises, ``iterator`` is put back where it was.

    Use it around the part of ``set_state`` that restores parents one after another, after the
    checks that need no change (``expect_state``, :func:`check_same_pipeline`)::

        def set_state(self, state):
            expect_state(state, "MyIterDataset", ("parents",))
            with rollback_on_error(self):
                for parent, s in zip(self._parents, state["parents"]):
                    parent.set_state(s)

    A state refused half-way (by the second parent, say) then leaves every stage unchanged.
    """
    before = iterator.get_state()
    try:
        yield
    except BaseException:
        iterator.set_state(before)
        raise
