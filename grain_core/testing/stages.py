"""Stage checks of the conformance kit: the state contract of one pipeline stage.

``check_stage(make_dataset)`` runs them all; every built-in plugin's tests call it for each stage.

* :func:`check_refused_state_leaves_iterator_untouched` — states from another pipeline and altered
  states (wrong types, negative or huge positions, other identifying values) are refused, and a
  refused ``set_state`` leaves the iterator where it was: it then emits exactly what it would have.
* :func:`check_state_round_trip_in_fresh_process` — a state saved here, restored in a new Python
  process into a pipeline built there, continues with exactly the same elements.
* :func:`check_chunk_path` — where the kernel has the chunk protocol
  (``DatasetIterator.next_chunk``), reading by chunks gives the elements and states of reading one
  by one.
* :func:`grain_core.testing.check_unread` — where the stage's iterator declares ``can_unread``,
  ``unread(count)`` after ``next()`` / ``next_chunk()`` gives back exactly ``count`` elements.
* :func:`grain_core.testing.check_element_spec` — where the pipeline has an element spec
  (``get_element_spec``), its first elements fit it (``element_spec=True``: the stage must have one).

``make_dataset`` is a zero-argument callable returning the pipeline (an ``IterDataset``, or a
``MapDataset`` read through ``to_iter_dataset``) ending in the stage under test. It is sent to the
fresh process with ``cloudpickle``: a module-level function is sent by reference (its module must be
importable there), a lambda or local function by value.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

from grain_core.state import IDENTIFYING_FIELDS, StateMismatchError
from grain_core.testing.compare import assert_elements_equal
from grain_core.testing.giveback import check_unread
from grain_core.testing.reading import iterate as _iterate
from grain_core.testing.reading import reference_run
from grain_core.testing.specs import check_element_spec

__all__ = [
    "altered_states",
    "check_chunk_path",
    "check_refused_state_leaves_iterator_untouched",
    "check_stage",
    "check_state_round_trip_in_fresh_process",
]

_BAD_POSITIONS: tuple[Any, ...] = ("3", 3.5, True, -1, 10**12)


def _take(it: Iterator[Any], n: int) -> list[Any]:
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def _paths(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*path, i))


def _replace(state: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(state)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def _other(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, list):
        return [*value, 0]
    return "other"


def altered_states(state: Any) -> Iterator[tuple[str, Any]]:
    """``(description, state)`` pairs derived from ``state`` that no pipeline produced: every int
    position replaced by ``"3"``, ``3.5``, ``True``, ``-1`` and ``10**12``; every ``kind`` and
    identifying field (:data:`grain_core.state.IDENTIFYING_FIELDS`) changed; every nested
    ``to_iter_dataset`` position moved to the end of its input (which stages that replay their
    input can refuse only after moving their parent); a field removed; and a state that is not a
    dict. Some may still be valid states (a huge position of an unbounded
    stream); :func:`check_refused_state_leaves_iterator_untouched` checks the ones refused."""
    yield "a list instead of the state", [state]
    for path, value in _paths(state):
        if not path:
            continue
        where = "state" + "".join(f"[{k!r}]" for k in path)
        key = path[-1]
        if key == "kind" or key in IDENTIFYING_FIELDS:
            yield f"{where} changed (another pipeline)", _replace(state, path, _other(value))
        elif isinstance(value, int) and not isinstance(value, bool):
            for bad in _BAD_POSITIONS:
                yield f"{where}={bad!r}", _replace(state, path, bad)
        if (
            isinstance(value, dict)
            and isinstance(value.get("next_index"), int)
            and isinstance(value.get("length"), int)
            and value["length"] >= 0
        ):
            moved = _replace(state, (*path, "next_index"), value["length"])
            yield f"{where} moved to the end of its input (a state refused while replaying)", moved
        if isinstance(key, str) and len(path) == 1:
            removed = copy.deepcopy(state)
            del removed[key]
            yield f"{where} removed", removed


def check_refused_state_leaves_iterator_untouched(
    make_dataset: Callable[[], Any],
    *,
    positions: tuple[int, ...] = (0, 3, 10),
    compare: int = 12,
    foreign: Callable[[], Any] | None = None,
) -> int:
    """Asserts that every refused ``set_state`` leaves the iterator untouched.

    At each of ``positions`` (elements read), each of :func:`altered_states` of the iterator's own
    state (and, with ``foreign``, the state of another pipeline's iterator at the same position) is
    given to ``set_state``. Where it raises, ``get_state()`` must be unchanged and the next
    ``compare`` elements must be those an untouched iterator emits. At least the altered ``kind``
    must be refused. Returns how many states were refused.
    """
    reference = _take(_iterate(make_dataset()), max(positions) + compare)
    refused = 0
    for pos in positions:
        candidates: list[tuple[str, Any]] = []
        probe = _iterate(make_dataset())
        _take(probe, pos)
        state = json.loads(json.dumps(probe.get_state()))
        probe.close()
        candidates += list(altered_states(state))
        if foreign is not None:
            other = _iterate(foreign())
            _take(other, pos)
            candidates.append(("a state of the foreign pipeline", other.get_state()))
            other.close()
        for what, bad in candidates:
            it = _iterate(make_dataset())
            _take(it, pos)
            before = it.get_state()
            try:
                it.set_state(bad)
            except (StateMismatchError, TypeError, ValueError, KeyError, IndexError) as e:
                refused += 1
                after = it.get_state()
                assert after == before, (
                    f"after refusing {what} at element {pos} ({type(e).__name__}: {e}), get_state() "
                    f"changed from {before!r} to {after!r}"
                )
                expected = reference[pos : pos + compare]
                assert_elements_equal(
                    expected,
                    _take(it, len(expected)),
                    f"elements after refusing {what} at element {pos}",
                )
            finally:
                it.close()
        kind_changed = [b for w, b in candidates if w.startswith("state['kind'] changed")]
        if kind_changed:
            it = _iterate(make_dataset())
            try:
                it.set_state(kind_changed[0])
            except StateMismatchError:
                pass
            else:
                raise AssertionError(f"a state with another kind was accepted: {kind_changed[0]!r}")
            finally:
                it.close()
    assert refused, "no altered state was refused"
    return refused


_CHILD = """
import pickle, sys
payload = pickle.loads(sys.stdin.buffer.read())
sys.path[:] = payload["path"]
import cloudpickle
make_dataset = cloudpickle.loads(payload["make"])
from grain_core.testing.stages import _iterate, _take
outs = []
for state in payload["states"]:
    it = _iterate(make_dataset())
    it.set_state(state)
    outs.append(_take(it, payload["n"]))
    it.close()
sys.stdout.buffer.write(cloudpickle.dumps(outs))
"""


def check_state_round_trip_in_fresh_process(
    make_dataset: Callable[[], Any],
    *,
    positions: tuple[int, ...] = (0, 1, 7),
    compare: int = 12,
    timeout: float = 300,
) -> None:
    """Asserts that a state saved here continues identically in a new Python process.

    The states at each of ``positions`` (through JSON) are restored in one fresh interpreter
    (``python -P``: the working directory is not importable there) into ``make_dataset()`` built
    there; the next ``compare`` elements after each must equal this process's.
    """
    reference = _take(_iterate(make_dataset()), max(positions) + compare)
    states = []
    for pos in positions:
        it = _iterate(make_dataset())
        _take(it, pos)
        states.append(json.loads(json.dumps(it.get_state())))
        it.close()
    payload = {
        "path": list(sys.path),
        "make": cloudpickle.dumps(make_dataset),
        "states": states,
        "n": compare,
    }
    proc = subprocess.run(
        [sys.executable, "-P", "-c", _CHILD],
        input=pickle.dumps(payload),
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "GRAIN_CORE_STRICT_PLUGINS": ""},
    )
    if proc.returncode:
        raise AssertionError(
            "restoring saved states in a fresh process failed:\n"
            + proc.stderr.decode(errors="replace")
        )
    for pos, got in zip(positions, cloudpickle.loads(proc.stdout)):
        assert_elements_equal(
            reference[pos : pos + compare], got, f"fresh-process restore at element {pos}"
        )


def check_chunk_path(
    make_dataset: Callable[[], Any], *, sizes: tuple[int, ...] = (1, 3, 8), max_elements: int = 200
) -> bool:
    """Asserts that ``next_chunk(n)`` gives the elements (and, after each chunk, the state) that
    ``next()`` gives, over the first ``max_elements`` elements. Returns False, checking nothing,
    where the kernel has no chunk protocol."""
    from grain_core.dataset.iterator import DatasetIterator

    if not hasattr(DatasetIterator, "next_chunk"):
        return False
    reference, states = reference_run(make_dataset, max_elements + max(sizes))
    for size in sizes:
        it = _iterate(make_dataset())
        got: list[Any] = []
        while len(got) < max_elements:
            try:
                chunk = it.next_chunk(size)
            except StopIteration:
                break
            assert 1 <= len(chunk) <= size, f"next_chunk({size}) returned {len(chunk)} elements"
            got += chunk
            assert it.get_state() == states[len(got)], (
                f"state after next_chunk({size}) reaching element {len(got)} differs from next()'s"
            )
        assert_elements_equal(reference[: len(got)], got, f"next_chunk({size}) vs next()")
        it.close()
    return True


def check_stage(
    make_dataset: Callable[[], Any],
    *,
    foreign: Callable[[], Any] | None = None,
    fresh_process: bool = True,
    element_spec: bool = False,
) -> None:
    """Runs every stage check on ``make_dataset`` (see the module docstring); ``element_spec=True``
    requires the pipeline to give an element spec."""
    check_refused_state_leaves_iterator_untouched(make_dataset, foreign=foreign)
    if fresh_process:
        check_state_round_trip_in_fresh_process(make_dataset)
    check_chunk_path(make_dataset)
    check_unread(make_dataset)
    check_element_spec(make_dataset, required=element_spec)
