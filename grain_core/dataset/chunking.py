"""Helpers of the chunk protocol (``DatasetIterator.next_chunk``) shared by kernel stages.

A kernel stage that calls a user function on whole chunks pulls chunks only from parents that can
*unread*: move back over (part of) what their latest ``next()`` / ``next_chunk()`` call returned.
When the function raises part-way through a chunk, the stage moves its parent back to just after
the last element it accounted for, so the state stays exact and nothing is lost. Kernel stages
define ``_unread(count)`` (``None`` where their own parent cannot); any other iterator is read one
element at a time by such stages, which is always exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grain_core.dataset.base import DatasetIterator

__all__ = ["can_unread", "mix_chunk", "mix_unread", "unread"]


def can_unread(it: DatasetIterator) -> bool:
    """Whether ``it`` can move back over elements its latest ``next``/``next_chunk`` returned."""
    return getattr(it, "_unread", None) is not None


def unread(it: DatasetIterator, count: int) -> None:
    """Moves ``it`` (for which :func:`can_unread` is true) back over ``count`` elements."""
    it._unread(count)  # type: ignore[attr-defined]


def mix_chunk(
    parents: Sequence[DatasetIterator], order: Sequence[int], pos: int, max_elements: int
) -> list[Any]:
    """The next elements of a fixed selection ``order`` (repeating) over ``parents``, from position
    ``pos``: each parent is asked once for all its elements among the next ``max_elements``
    positions, and the longest prefix every parent delivered is returned; parents that delivered
    more are moved back (``_unread``). Empty when the first position's parent is exhausted."""
    period = len(order)
    seq = [order[(pos + j) % period] for j in range(max_elements)]
    need = [0] * len(parents)
    for d in seq:
        need[d] += 1
    got: list[list[Any]] = [[] for _ in parents]
    for d, c in enumerate(need):
        if c:
            try:
                got[d] = parents[d].next_chunk(c)
            except StopIteration:
                pass
    taken = [0] * len(parents)
    out: list[Any] = []
    append = out.append
    for d in seq:
        i = taken[d]
        g = got[d]
        if i >= len(g):
            break
        append(g[i])
        taken[d] = i + 1
    for d, g in enumerate(got):
        if len(g) > taken[d]:
            unread(parents[d], len(g) - taken[d])
    return out


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
