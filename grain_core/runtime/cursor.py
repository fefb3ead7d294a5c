"""The ``mp_prefetch`` consumer's view of its workers, and the run it serves from.

:class:`Cursor` (with one :class:`WorkerView` per worker) is everything the consumer's ``next()``
changes, immutable and replaced by one assignment, so an exception raised into ``next()`` leaves
the old cursor or the new one, never a mix (:mod:`grain_core.runtime.consumer`).

The *run*: when every worker has a message at hand, the elements ``next()`` can return before the
next credit falls due, in the round-robin order (:func:`run_length`, :func:`run_elements`). The
consumer serves them from one list with no change to its cursor, then folds the ones it served
into the cursor at once (:func:`fold_run`). A run never reaches the last element of a worker's
message, so folding only moves offsets inside the messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from grain_core.runtime import round_robin
from grain_core.runtime.messages import Elements, Failure, Position

__all__ = [
    "Cursor",
    "WorkerView",
    "fold_run",
    "run_elements",
    "run_length",
    "share_of",
    "with_worker",
]

_tuple_new = tuple.__new__


class WorkerView(NamedTuple):
    """The consumer's view of one worker; replaced as a whole, never changed in place."""

    # The position after the elements returned, while ``last`` is None (after a restore, or when
    # the latest element returned ended its message) ...
    state: Any = None
    skip: int = 0
    exhausted: bool = False  # every element returned and End received
    ended: bool = False  # End received (elements may still be buffered)
    buffered: tuple[Elements, ...] = ()
    offset: int = 0  # elements of buffered[0] already returned
    consumed: int = 0  # elements returned in this generation (the Consumed count)
    seq: int = 0  # the last message applied
    failure: Failure | None = None
    # ... else the message of the latest element returned (still buffered: holding it keeps no
    # element alive) and how many of its elements were returned.
    last: Elements | None = None
    taken: int = 0

    def position(self) -> Position:
        """The position after the elements returned."""
        if self.last is None:
            return Position(self.state, self.skip)
        return self.last.position_after(self.taken)


class Cursor(NamedTuple):
    """Everything ``next()`` changes, replaced by one assignment: an exception raised into
    ``next()`` at any point leaves either the old or the new cursor, never a mix."""

    generation: int
    next_worker: int
    position: int
    workers: tuple[WorkerView, ...]


def share_of(w: WorkerView) -> round_robin.Share:
    """Worker ``w``'s share of a round-robin state."""
    pos = w.position()
    return round_robin.Share(pos.state, pos.skip, w.exhausted)


def with_worker(cur: Cursor, i: int, w: WorkerView) -> Cursor:
    """``cur`` with worker ``i``'s view replaced by ``w``."""
    return cur._replace(workers=cur.workers[:i] + (w,) + cur.workers[i + 1 :])


def run_length(cur: Cursor, credited: Sequence[int], credit_step: int, buffer_size: int) -> int:
    """How many elements from ``cur`` on can be returned with no credit falling due and no message
    to wait for, in the round-robin order; 0 unless every worker has a message buffered and none
    has failed. A credit falls due (``RoundRobinConsumer._credit_due``) at the last element of a
    message, once ``max(credit_step, size // 2)`` elements went uncredited (``credited``: each
    worker's count last sent), and, in the last message received, once the rest fits the buffer;
    the run stops before the first such element of any worker."""
    ws = cur.workers
    k = len(ws)
    first = cur.next_worker
    stop = -1
    for j in range(k):
        w = ws[j]
        if w.failure is not None or not w.buffered:
            return 0
        size = len(w.buffered[0].elements)
        left = size - w.offset
        # this worker's elements returnable before the first that makes a credit due
        allowed = min(left - 1, max(credit_step, size >> 1) - (w.consumed - credited[j]) - 1)
        if len(w.buffered) == 1:  # its last message received: due once the rest fits
            allowed = min(allowed, left - buffer_size - 1)
        if allowed <= 0:
            return 0
        end = allowed * k + (j - first) % k  # the run position of its first one not allowed
        if stop < 0 or end < stop:
            stop = end
    return max(stop, 0)


def run_elements(cur: Cursor, stop: int) -> list[Any]:
    """The first ``stop`` elements from ``cur`` on, in the round-robin order (``stop`` at most
    :func:`run_length`)."""
    ws = cur.workers
    k = len(ws)
    first = cur.next_worker
    run: list[Any] = [None] * stop
    for j in range(k):
        w = ws[j]
        d = (j - first) % k
        n = len(range(d, stop, k))
        if n:
            run[d::k] = w.buffered[0].elements[w.offset : w.offset + n]
    return run


def fold_run(cur: Cursor, served: int) -> Cursor:
    """``cur`` after the first ``served`` elements of its run were returned."""
    k = len(cur.workers)
    first = cur.next_worker
    ws = list(cur.workers)
    for j in range(k):
        t = len(range((j - first) % k, served, k))
        if t:
            w = ws[j]
            msg = w.buffered[0]
            off = w.offset + t  # inside the message (see run_length)
            ws[j] = _tuple_new(
                WorkerView,
                (None, 0, False, w.ended, w.buffered, off, w.consumed + t, w.seq, w.failure, msg, off),
            )
    return Cursor(cur.generation, (first + served) % k, cur.position + served, tuple(ws))
