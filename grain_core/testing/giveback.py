"""Conformance check of the give-back part of the chunk protocol (``DatasetIterator.unread``).

A stage whose iterator declares ``can_unread`` promises that ``unread(count)``, right after a
``next()`` / ``next_chunk()`` call, moves it back over the last ``count`` elements that call
returned (in total over several ``unread`` calls, at most that many): the elements that follow
are then those of an iterator that never returned them, and ``get_state()`` is the position after
the elements kept (the state element-wise reading has there, or another that continues the same).
:func:`check_unread` asserts that against element-wise reading; ``check_stage`` runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grain_core.testing.compare import assert_elements_equal
from grain_core.testing.reading import iterate as _iterate
from grain_core.testing.reading import reference_run

__all__ = ["check_unread"]


def check_unread(
    make_dataset: Callable[[], Any], *, sizes: tuple[int, ...] = (1, 3, 8), max_elements: int = 100
) -> bool:
    """Asserts that ``unread`` gives back exactly what it is asked to, over the first
    ``max_elements`` elements, for ``next_chunk(n)`` with each ``n`` in ``sizes`` and for
    ``next()``: after each call the iterator gives back 0, 1, ... (cycling) of the elements it
    returned, in one ``unread`` or split in two, and its state and the elements read next must be
    those of element-wise reading. Returns False, checking nothing, where the pipeline's iterator
    does not declare ``can_unread``."""
    probe = _iterate(make_dataset())
    able = bool(getattr(probe, "can_unread", False))
    probe.close()
    if not able:
        return False
    reference, states = reference_run(make_dataset, max_elements + max(sizes))
    for size in (*sizes, 0):  # 0: next() instead of next_chunk
        it = _iterate(make_dataset())
        what = f"next_chunk({size})" if size else "next()"
        pos = 0  # elements kept so far
        step = 0
        while pos < max_elements:
            try:
                got = it.next_chunk(size) if size else [next(it)]
            except StopIteration:
                break
            assert_elements_equal(reference[pos : pos + len(got)], got, f"{what} at {pos}")
            back = step % (len(got) + 1)
            if back >= 2 and step % 2:  # split in two calls
                it.unread(1)
                it.unread(back - 1)
            else:
                it.unread(back)
            step += 1
            pos += len(got) - back
            state = it.get_state()
            if state != states[pos]:  # another state of the same position (a filter's) is fine
                _check_continues(make_dataset, state, reference[pos : pos + 3], what, back, pos)
        if pos < max_elements:  # exhausted: nothing may be left after the elements kept
            assert pos == len(reference), f"{what}: stopped after {pos} of {len(reference)}"
        it.close()
    return True


def _check_continues(
    make_dataset: Callable[[], Any], state: Any, expected: list[Any], what: str, back: int, pos: int
) -> None:
    fresh = _iterate(make_dataset())
    try:
        fresh.set_state(state)
        got = []
        for x in fresh:
            got.append(x)
            if len(got) == len(expected):
                break
    finally:
        fresh.close()
    assert_elements_equal(
        expected,
        got,
        f"the state after {what} and unread({back}) is not the position after element {pos}",
    )
