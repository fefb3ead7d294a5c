"""Helpers of the chunk protocol (``DatasetIterator.next_chunk``) shared by kernel stages.

A kernel stage that calls a user function on whole chunks pulls chunks only from parents that can
*unread*: move back over (part of) what their latest ``next()`` / ``next_chunk()`` call returned.
When the function raises part-way through a chunk, the stage moves its parent back to just after
the last element it accounted for, so the state stays exact and nothing is lost. The give-back is
public: an iterator whose ``can_unread`` is true implements ``DatasetIterator.unread(count)``
(see ``docs/writing-plugins.md``); any other iterator is read one element at a time by such
stages, which is always exact.
"""

from __future__ import annotations

import dataclasses
import operator
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from grain_core.dataset.iterator import DatasetIterator

__all__ = [
    "CHUNK_BYTES",
    "MixRead",
    "can_unread",
    "give_back_inflight",
    "mix_chunk",
    "mix_unread",
    "source_fan_in",
    "stages_below",
    "unread",
]

CHUNK_BYTES = 4 << 20
"""A chunk holds about this many bytes at most (at least one element), as measured by
:func:`grain_core.tree.nbytes`."""


def stages_below(ds: Any) -> Iterator[tuple[Any, int]]:
    """Each stage of the pipeline under ``ds`` (``ds`` first), once per path down to it, with the
    product of the ``reads_per_element`` (a batch's size; 1 when absent) of the stages on that path
    down to it, itself included. Walks ``parents``; at most 10,000 visits (a pipeline is far
    shallower, and a cycle cannot loop)."""
    todo, seen = [(ds, 1)], 0
    while todo and seen < 10_000:
        node, fan = todo.pop()
        seen += 1
        per = getattr(node, "reads_per_element", 1)
        fan *= per if isinstance(per, int) and per > 1 else 1
        yield node, fan
        todo.extend((p, fan) for p in tuple(getattr(node, "parents", ()) or ()))


def source_fan_in(ds: Any) -> int:
    """How many source elements one element of the ``MapDataset`` ``ds`` reads at most: the
    product of the ``reads_per_element`` of the stages on its longest path down to a source
    (:func:`stages_below`). ``to_iter_dataset`` without threads divides its chunk cap by it, so a
    chunk of batches makes no more Python objects than a chunk of elements (larger chunks spill
    the CPU caches: measured ~180 -> ~230 ns an element at 32x the elements)."""
    return max(fan for _, fan in stages_below(ds))


def can_unread(it: DatasetIterator) -> bool:
    """Whether ``it`` can move back over elements its latest ``next``/``next_chunk`` returned
    (its ``can_unread`` flag, see :meth:`DatasetIterator.unread`)."""
    return bool(it.can_unread)


def unread(it: DatasetIterator, count: int) -> None:
    """Moves ``it`` (for which :func:`can_unread` is true) back over ``count`` elements."""
    it.unread(count)


@dataclasses.dataclass
class MixRead:
    """What :func:`mix_chunk` read: ``elements`` for the positions from ``pos`` on (``count`` of
    them), then what stopped it early, if anything, at the position right after them: ``error``,
    an ``Exception`` a parent raised for that position (the parent consumed that element), or
    ``exhausted``, that position's parent has no elements left."""

    elements: list[Any]
    error: Exception | None = None
    exhausted: bool = False
    count: int = 0


def give_back_inflight(parents: Sequence[DatasetIterator], inflight: dict[int, Any]) -> None:
    """Moves each parent ``d`` of ``inflight`` back over what its latest call returned and is
    noted there (a list of elements, or a count), removing the entry right after: an interrupt
    leaves each entry either given back and removed or neither, so calling this again finishes
    the job (nothing given back twice, nothing lost)."""
    for d in list(inflight):
        v = inflight[d]
        n = v if isinstance(v, int) else len(v)
        if n:
            unread(parents[d], n)  # then no call before the entry goes
        del inflight[d]


def mix_chunk(
    parents: Sequence[DatasetIterator],
    order: Sequence[int],
    pos: int,
    max_elements: int,
    inflight: dict[int, Any] | None = None,
) -> MixRead:
    """The next elements of a fixed selection ``order`` (repeating) over ``parents``, from position
    ``pos``: each parent is asked once for all its elements among the next ``max_elements``
    positions, and the longest prefix every parent delivered is returned; parents that delivered
    more are moved back (``unread``).

    Parents are asked in the order of their first position, and none whose first position lies
    past the point where an earlier one fell short, so an ``Exception`` a parent raises (for its
    first element asked, which it consumed) always belongs to the position right after the
    returned elements.

    ``inflight`` (the caller's, empty) notes, parent by parent, what this read took from each
    parent and has not given back: on return it holds exactly the returned elements' share of
    each parent, which the caller drops in the same assignment that commits the elements; when
    an interrupt (a ``BaseException`` that is not an ``Exception``) lands anywhere before that,
    :func:`give_back_inflight` on it puts every parent back (this function does so itself for an
    interrupt inside it), so nothing is consumed.
    """
    if inflight is None:
        inflight = {}
    # Whole-chunk steps in C (slices, Counter, dict.fromkeys, map): no Python step per element.
    period = len(order)
    start = pos % period
    rot = [*order[start:], *order[:start]]  # one period, from this position's
    seq = (rot * -(-max_elements // period))[:max_elements]
    firsts = dict.fromkeys(seq[:period])  # the parents in the order of their first position
    need = _counts(seq, firsts)
    bound = max_elements  # no position at or after it is read
    error: Exception | None = None
    exhausted = False
    try:
        for d in firsts:
            f = seq.index(d)
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
            inflight[d] = g  # noted as the call returns: no call in between
            if len(g) < need[d]:  # short: the position of its first missing element bounds all
                bound = min(bound, _occurrence(rot, seq, d, len(g)))
        picked = seq[:bound]
        taken = need if bound == max_elements else _counts(picked, firsts)
        if len(inflight) == 1:  # one parent: its elements in order
            (g,) = inflight.values()
            out = list(g[:bound])
        elif 4 * period <= bound:  # a few slices per parent (see _interleave)
            out = _interleave(rot, bound, inflight, taken)
        else:
            take: list[Any] = [None] * len(parents)
            for d, g in inflight.items():
                take[d] = iter(g).__next__
            out = list(map(operator.call, map(take.__getitem__, picked)))
        for d in list(inflight):
            g = inflight[d]
            keep = g[: taken[d]]
            if len(g) > len(keep):
                unread(parents[d], len(g) - len(keep))  # then no call before the note changes
                inflight[d] = keep
        count = len(out)
    except BaseException as e:
        if not isinstance(e, Exception):
            give_back_inflight(parents, inflight)
        raise
    return MixRead(out, error, exhausted, count)


def _counts(seq: list[int], keys: Any) -> Any:
    """How often each of ``keys`` occurs in ``seq`` (a ``Counter`` for many keys)."""
    if len(keys) > 8:
        return Counter(seq)
    return {d: seq.count(d) for d in keys}


def _occurrence(rot: list[int], seq: list[int], d: int, k: int) -> int:
    """The position of the ``k``-th (from 0) ``d`` in ``seq``, the period ``rot`` repeated."""
    if len(rot) > len(seq):
        return [j for j, x in enumerate(seq) if x == d][k]
    offs = [o for o, x in enumerate(rot) if x == d]
    return (k // len(offs)) * len(rot) + offs[k % len(offs)]


def _interleave(rot: list[int], bound: int, got: dict[int, Any], taken: Any) -> list[Any]:
    """The elements of positions ``0 .. bound - 1`` of the repeating selection ``rot``, from each
    parent's elements ``got[d]`` (its first ``taken[d]`` ones, in position order): parent ``d``'s
    ``j``-th offset in ``rot`` (of ``c``) takes its elements ``j, j + c, ...``, one extended
    slice assignment each (what :func:`mix_chunk` otherwise builds element by element)."""
    period = len(rot)
    out: list[Any] = [None] * bound
    offsets: dict[int, list[int]] = {}
    for o, d in enumerate(rot):
        offsets.setdefault(d, []).append(o)
    for d, g in got.items():
        mine = g[: taken[d]]
        offs = offsets[d]
        c = len(offs)
        for j, o in enumerate(offs):
            if o < bound:
                out[o:bound:period] = mine[j::c]
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
