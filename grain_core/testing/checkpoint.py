"""Checkpoint and determinism checks for any dataset."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from typing import Any

from grain_core.checkpoint.files import decode_state, encode_state
from grain_core.testing.compare import assert_elements_equal


def _iterate(ds: Any) -> Any:
    from grain_core.dataset.base import MapDataset

    return iter(ds.to_iter_dataset() if isinstance(ds, MapDataset) else ds)


def assert_equal_output_after_checkpoint(
    ds: Any,
    *,
    checkpoints: Iterable[int] | None = None,
    max_elements: int = 1000,
) -> None:
    """Asserts that restoring any saved state continues with exactly the original elements.

    Iterates ``ds`` (an ``IterDataset``, or a ``MapDataset`` read through ``to_iter_dataset``) up
    to ``max_elements`` elements, saving ``get_state()`` at each step in ``checkpoints`` (default:
    0, 1, 2, 3, 5, 8, ... and the last), round-tripped through the checkpoint file format
    (:mod:`grain_core.checkpoint`: JSON envelope and text). For each state, a fresh iterator restored
    from it must produce the same remaining elements, and end where the original ended (no extra
    element after an exhausted pipeline); restoring into the already advanced original iterator
    must too.
    """
    it = _iterate(ds)
    states: dict[int, Any] = {}
    wanted = set(checkpoints) if checkpoints is not None else None
    elements: list[Any] = []
    exhausted = False
    try:
        for step in itertools.count():
            if wanted is None or step in wanted:
                state = it.get_state()
                try:
                    # Through the checkpoint envelope and JSON text, as a file on disk holds it.
                    doc = json.loads(json.dumps(encode_state(state), allow_nan=False))
                    states[step] = decode_state(doc, f"state at step {step}")
                except (TypeError, ValueError) as e:
                    raise AssertionError(f"get_state() at step {step} is not JSON: {e}") from e
            if step >= max_elements:
                break
            try:
                elements.append(next(it))
            except StopIteration:
                exhausted = True
                break
        if wanted is None:
            fib = {0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, len(elements)}
            states = {k: v for k, v in states.items() if k in fib}
        for step, state in sorted(states.items()):
            expected = elements[step:]
            fresh = _iterate(ds)
            try:
                fresh.set_state(state)
                got = list(itertools.islice(fresh, len(expected) + (1 if exhausted else 0)))
            finally:
                fresh.close()
            assert_elements_equal(expected, got, f"fresh iterator restored at step {step}")
        if states:
            step, state = min(states.items())
            it.set_state(state)
            got = list(itertools.islice(it, len(elements) - step))
            assert_elements_equal(elements[step:], got, f"same iterator restored at step {step}")
    finally:
        it.close()


def check_deterministic(make_dataset: Any, *, max_elements: int = 200) -> None:
    """Asserts that two datasets built by ``make_dataset()`` produce identical elements."""
    out = []
    for _ in range(2):
        it = _iterate(make_dataset())
        try:
            out.append(list(itertools.islice(it, max_elements)))
        finally:
            it.close()
    assert_elements_equal(out[0], out[1], "two runs of the same pipeline")
