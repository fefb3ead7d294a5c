"""Helpers of the chunk protocol (``DatasetIterator.next_chunk``) shared by kernel stages.

A kernel stage that calls a user function on whole chunks pulls chunks only from parents that can
*unread*: move back over (part of) what their latest ``next()`` / ``next_chunk()`` call returned.
When the function raises part-way through a chunk, the stage moves its parent back to just after
the last element it accounted for, so the state stays exact and nothing is lost. Kernel stages
define ``_unread(count)`` (``None`` where their own parent cannot); any other iterator is read one
element at a time by such stages, which is always exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from grain_core.dataset.base import DatasetIterator

__all__ = [
    "CHUNK_BYTES",
    "MixRead",
    "can_unread",
    "mix_chunk",
    "mix_unread",
    "unread",
]

CHUNK_BYTES = 4 << 20
"""A chunk holds about this many bytes at most (at least one element), as measured by
:func:`grain_core.tree.nbytes`."""


def can_unread(it: DatasetIterator) -> bool:
    """Whether ``it`` can move back over elements its latest ``next``/``next_chunk`` returned."""
    return getattr(it, "_unread", None) is not None


def unread(it: DatasetIterator, count: int) -> None:
    """Moves ``it`` (for which :func:`can_unread` is true) back over ``count`` elements."""
    it._unread(count)  # type: ignore[attr-defined]


@dataclasses.dataclass
class MixRead:
    """What :func:`mix_chunk` read: ``elements`` for the positions from ``pos`` on, then what
    stopped it early, if anything, at the position right after them: ``error``, an ``Exception``
    a parent raised for that position (the parent consumed that element), or ``exhausted``, that
    position's parent has no elements left."""

    elements: list[Any]
    error: Exception | None = None
    exhausted: bool = False


def mix_chunk(
    parents: Sequence[DatasetIterator], order: Sequence[int], pos: int, max_elements: int
) -> MixRead:
    """The next elements of a fixed selection ``order`` (repeating) over ``parents``, from position
    ``pos``: each parent is asked once for all its elements among the next ``max_elements``
    positions, and the longest prefix every parent delivered is returned; parents that delivered
    more are moved back (``_unread``).

    Parents are asked in the order of their first position, and none whose first position lies
    past the point where an earlier one fell short, so an ``Exception`` a parent raises (for its
    first element asked, which it consumed) always belongs to the position right after the
    returned elements. A ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``)
    moves every parent back over what it delivered and propagates: nothing is consumed.
    """
    period = len(order)
    seq = [order[(pos + j) % period] for j in range(max_elements)]
    need = [0] * len(parents)
    first: dict[int, int] = {}  # parent -> its first position (offset from pos), in that order
    for j, d in enumerate(seq):
        if not need[d]:
            first[d] = j
        need[d] += 1
    got: list[list[Any]] = [[] for _ in parents]
    bound = max_elements  # no position at or after it is read
    error: Exception | None = None
    exhausted = False
    try:
        for d, f in first.items():
            if f >= bound:
                break
            try:
                g = parents[d].next_chunk(need[d])
            except StopIteration:
                bound, exhausted = f, True
                break
            except Exception as e:
                bound, error = f, e
                break
            got[d] = g
            if len(g) < need[d]:  # short: the position of its first missing element bounds all
                bound = min(bound, [j for j, x in enumerate(seq) if x == d][len(g)])
    except BaseException:
        for d, g in enumerate(got):
            if g:
                unread(parents[d], len(g))
        raise
    taken = [0] * len(parents)
    out: list[Any] = []
    append = out.append
    for d in seq[:bound]:
        i = taken[d]
        append(got[d][i])
        taken[d] = i + 1
    for d, g in enumerate(got):
        if len(g) > taken[d]:
            unread(parents[d], len(g) - taken[d])
    return MixRead(out, error, exhausted)


def mix_unread(
    parents: Sequence[DatasetIterator], order: Sequence[int], pos: int, count: int
) -> None:
    """Moves ``parents`` back over the ``count`` elements before position ``pos`` of ``order``."""
    period = len(order)
    back = [0] * len(parents)
    for p in range(pos - count, pos):
        back[order[p % period]] += 1
    for d, c in enumerate(back):
        if c:
            unread(parents[d], c)
