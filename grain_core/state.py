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
import dataclasses
import hashlib
import json
import numbers
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from grain_core import global_config as _config
from grain_core.validation import check_instance

__all__ = [
    "STATE_FORMAT_VERSION",
    "IDENTIFYING_FIELDS",
    "InvalidStateError",
    "StateField",
    "StateMismatchError",
    "StateOutOfRangeError",
    "check_json_state",
    "check_same_pipeline",
    "check_state_fields",
    "check_state_int",
    "check_state_types",
    "check_fingerprint",
    "explain_stage_difference",
    "expect_state",
    "fingerprint",
    "make_state",
    "rollback_on_error",
]

STATE_FORMAT_VERSION = 1


class StateMismatchError(ValueError):
    """A state does not fit the iterator it was given to (another pipeline, or another version)."""


class StateOutOfRangeError(StateMismatchError, IndexError):
    """A position in a state lies outside the data it is restored into.

    A :class:`StateMismatchError` and an ``IndexError``, which Grain raises for a checkpoint's
    ``next_index`` out of range.
    """


class InvalidStateError(StateMismatchError, TypeError):
    """A state field has the wrong type or is out of range (the state was altered or corrupted).

    A :class:`StateMismatchError` (a ``ValueError``), so code catching mismatches catches these
    too, and a ``TypeError``, as Python raises for a wrong type.
    """


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
    _check_state_dict(state)
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
    if isinstance(expected, Mapping):
        _check_state_dict(state)
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
                    why = None
                    if key == "fingerprint":
                        why = explain_stage_difference(state.get("stages"), expected.get("stages"))
                        if why and state.get("from_grain") and f" {_config.MODE_FIELD} " in why:
                            # Continues a Grain state in a correct-mode pipeline: the iterator
                            # switches and checks the Grain-exact fingerprint itself.
                            continue
                    raise _mismatch(
                        sub,
                        f"{why} (the state's vs this pipeline's)"
                        if why
                        else f"the state has {state[key]!r}, this pipeline has {value!r}",
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


# --- field validation ---------------------------------------------------------------------------------


def check_state_int(
    value: Any, field: str, *, minimum: int | None = 0, maximum: int | None = None, where: str = "state"
) -> int:
    """Returns ``value`` if it is an int (not a bool, float or string) in ``[minimum, maximum]``.

    The one check every integer position of a state gets before ``set_state`` changes anything
    (``next_index``, counts, skips, worker numbers). ``where`` names the stage (e.g.
    ``"PrefetchDatasetIterator"``); ``None`` bounds are open.

    Raises :class:`InvalidStateError` naming the stage, the field, the value and the allowed range.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidStateError(
            f"{where}: state field {field} must be an int, got {type(value).__name__} {value!r}: "
            "the state was altered or corrupted. Restore a state returned by get_state()."
        )
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        lo = "-inf" if minimum is None else minimum
        hi = "inf" if maximum is None else maximum
        raise InvalidStateError(
            f"{where}: state field {field} is {value}, outside [{lo}, {hi}] for this pipeline: "
            "the state was altered or comes from another pipeline."
        )
    return value


@dataclasses.dataclass(frozen=True)
class StateField:
    """How ``set_state`` validates one field of a stage's state before anything changes.

    A stage declares its fields in ``DatasetIterator.state_fields()``; the kernel checks them in
    ``check_state`` (see :func:`check_state_fields`). Build one with the class methods:

    * :meth:`position` — an int in ``[minimum, maximum]`` (bools, floats and strings refused);
    * :meth:`flag` — a bool;
    * :meth:`identity` — a value that identifies the pipeline (a seed, a size, a fingerprint): it
      must equal the value in this iterator's own ``get_state()``;
    * :meth:`parent` — the state of ``parents[index]``, checked by that parent's ``check_state``;
    * :meth:`opaque` — present, but checked only by the stage's own code.

    ``nullable=True`` also accepts ``None``.
    """

    role: str
    minimum: int | None = 0
    maximum: int | None = None
    nullable: bool = False
    index: int = 0

    @classmethod
    def position(
        cls, minimum: int | None = 0, maximum: int | None = None, *, nullable: bool = False
    ) -> StateField:
        return cls("position", minimum, maximum, nullable)

    @classmethod
    def flag(cls, *, nullable: bool = False) -> StateField:
        return cls("flag", nullable=nullable)

    @classmethod
    def identity(cls) -> StateField:
        return cls("identity")

    @classmethod
    def parent(cls, index: int = 0, *, nullable: bool = False) -> StateField:
        return cls("parent", nullable=nullable, index=index)

    @classmethod
    def opaque(cls, *, nullable: bool = True) -> StateField:
        return cls("opaque", nullable=nullable)


def check_state_fields(
    state: Any,
    kind: str,
    fields: Mapping[str, StateField],
    current: Mapping[str, Any],
    *,
    check_parent: Any = None,
) -> None:
    """Checks ``state`` against a stage's declared ``fields``; changes nothing.

    ``kind`` is the stage's state kind, ``current`` its own ``get_state()`` (where identity fields
    are read from), and ``check_parent(index, substate)`` validates a :meth:`StateField.parent`
    field (``DatasetIterator.check_state`` passes its parents' ``check_state``).

    Raises ``TypeError`` for a non-dict, :class:`StateMismatchError` for another stage or another
    pipeline (naming the stage and field, e.g. ``"BatchIterDataset: batch_size 32 vs 64"``) and
    :class:`InvalidStateError` for a wrong type or range.
    """
    expect_state(state, kind, fields.keys())
    for name, spec in fields.items():
        value = state[name]
        if value is None and spec.nullable:
            continue
        if spec.role == "position":
            check_state_int(value, name, minimum=spec.minimum, maximum=spec.maximum, where=kind)
        elif spec.role == "flag":
            if not isinstance(value, bool):
                raise InvalidStateError(
                    f"{kind}: state field {name!r} must be a bool, got {type(value).__name__} "
                    f"{value!r}: the state was altered or corrupted."
                )
        elif spec.role == "identity":
            mine = current.get(name)
            if value != mine:
                raise StateMismatchError(
                    f"{kind}: {name} {value!r} vs {mine!r} — the state has {name}={value!r}, this "
                    f"pipeline has {name}={mine!r}: it comes from a different pipeline (other data, "
                    "seed or structure). Restore it into the pipeline that saved it."
                )
        elif spec.role == "parent":
            if not isinstance(value, Mapping) and value is not None:
                raise InvalidStateError(
                    f"{kind}: state field {name!r} must be a parent state (a dict), got "
                    f"{type(value).__name__}."
                )
            if check_parent is not None:
                check_parent(spec.index, value)
        elif spec.role != "opaque":
            raise ValueError(f"{kind}: unknown StateField role {spec.role!r} for {name!r}.")


def check_state_types(template: Any, state: Any, *, where: str = "state") -> None:
    """Checks that every value in ``state`` has the type of its counterpart in ``template``.

    ``template`` is a ``get_state()`` of the same iterator (the kernel uses the live iterator's own
    state before every ``set_state``). Both are walked together where they describe the same stage
    (equal ``kind``, or no kind on either side): an int in the template needs an int in the state
    (bools, floats and strings refused) that is not negative when the template's is not; a bool
    needs a bool, a string a string, a dict a dict, a list a list. ``None`` on either side matches
    anything, lists of different lengths are not walked, and keys missing on either side and
    different ``kind`` values are left to the stage's own checks (they may be conversions, as an
    elastic restore is). Identity is not compared here (see :func:`check_same_pipeline`).

    Raises :class:`InvalidStateError` naming the path (e.g. ``state.parent.next_index``), or
    ``TypeError`` when ``state`` is not a dict while ``template`` is.
    """
    if isinstance(template, Mapping):
        _check_state_dict(state)
    _walk_types(template, state, where)


_A = {"int": "an int", "bool": "a bool", "float": "a number", "str": "a str", "dict": "a dict",
      "list": "a list"}


def _walk_types(t: Any, s: Any, path: str) -> None:
    if isinstance(t, numbers.Integral) and not isinstance(t, bool):
        t = int(t)
    if t is None or s is None:
        return
    if isinstance(t, bool):
        ok = isinstance(s, bool)
    elif isinstance(t, numbers.Integral):
        ok = isinstance(s, numbers.Integral) and not isinstance(s, bool)
        if ok and int(t) >= 0 and int(s) < 0:
            raise InvalidStateError(
                f"{path} must be >= 0 (a position; this pipeline's is {t}), got {s}: the state was "
                "altered or corrupted. Restore a state returned by get_state()."
            )
    elif isinstance(t, float):
        ok = isinstance(s, numbers.Real) and not isinstance(s, bool)
    elif isinstance(t, str):
        ok = isinstance(s, str)
    elif isinstance(t, Mapping):
        ok = isinstance(s, Mapping)
        if ok:
            if t.get("kind") != s.get("kind"):
                return
            for key, value in t.items():
                if key in s:
                    _walk_types(value, s[key], f"{path}.{key}")
            return
    elif isinstance(t, list):
        ok = isinstance(s, list)
        if ok and len(t) == len(s):
            for i, (a, b) in enumerate(zip(t, s)):
                _walk_types(a, b, f"{path}[{i}]")
            return
    else:
        return
    if not ok:
        name = type(t).__name__
        raise InvalidStateError(
            f"{path} must be {_A.get(name, 'a ' + name)} like this pipeline's ({t!r}), got "
            f"{type(s).__name__} {s!r}: the state was altered or corrupted. Restore a state "
            "returned by get_state()."
        )


# --- readable pipeline differences -----------------------------------------------------------------


def explain_stage_difference(saved: Any, current: Any) -> str | None:
    """Says which field of which stage differs between two stage lists, or ``None``.

    ``saved`` / ``current`` are the ``stages`` fields of two states: one JSON string per
    ``MapDataset`` stage (``{"stage": class name, "length": n, field: value, ...}``, see
    ``grain_core.dataset.fingerprints.stage_descriptions``). Returns e.g. ``"BatchMapDataset batch_size 32
    vs 64"``; ``None`` when either list is missing or malformed or nothing differs.
    """
    if not isinstance(saved, list) or not isinstance(current, list):
        return None
    try:
        a = [json.loads(x) for x in saved]
        b = [json.loads(x) for x in current]
    except (TypeError, ValueError):
        return None
    for x, y in zip(reversed(a), reversed(b)):  # from the sources up: the first cause first
        if not isinstance(x, dict) or not isinstance(y, dict):
            return None
        if x.get("stage") != y.get("stage"):
            return f"a {x.get('stage')} stage vs a {y.get('stage')} stage"
        keys = [k for k in dict.fromkeys([*x, *y]) if k != "length"] + ["length"]
        for key in keys:  # a stage's own fields first: a length follows from them
            if x.get(key) != y.get(key):
                return f"{x.get('stage')} {key} {x.get(key)!r} vs {y.get(key)!r}"
    if len(a) != len(b):
        return f"{len(a)} MapDataset stages vs {len(b)}"
    return None


def check_fingerprint(state: Any, kind: str, fingerprint: str, stages: list[str]) -> None:
    """Refuses ``state`` if its ``fingerprint`` differs from ``fingerprint``, saying which field of
    which stage differs (from the ``stages`` both sides record), not the digests. Changes nothing;
    a state without a fingerprint is left to the other checks."""
    if not isinstance(state, Mapping) or "fingerprint" not in state:
        return
    if state["fingerprint"] == fingerprint:
        return
    why = explain_stage_difference(state.get("stages"), stages)
    if why and f" {_config.MODE_FIELD} " in why:  # same pipeline, built in the other data mode
        saved = _config.CORRECT_MODE if repr(_config.CORRECT_MODE) in why.split(" vs ")[0] else None
        raise _config.DataModeError(f"{kind}: {why}. {_config.mode_switch_hint(saved)}")
    raise StateMismatchError(
        f"{kind}: the state comes from a different pipeline: "
        + (why if why else f"fingerprint {state['fingerprint']!r} vs {fingerprint!r}")
        + " (the state's value vs this pipeline's). Restore it into the pipeline that saved it."
    )


def _check_state_dict(state: Any) -> None:
    check_instance(
        state, Mapping, "set_state", verb="expects", expected="the dict returned by get_state()"
    )
