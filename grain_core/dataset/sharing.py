"""How ``mp_prefetch`` splits one pipeline across worker processes.

A worker builds its iterator inside :func:`worker_share` ``(index, count)``. Every stage that can
read a share of its input — ``to_iter_dataset`` (index ``i::count`` of its ``MapDataset``) and plugin
stages that opt in (e.g. interleave, which takes every ``count``-th dataset) — calls
:func:`claim_worker_share` while its iterator is being created, and builds that iterator already
restricted, so every state taken downstream (even at construction) describes the worker's share.
Iterators created later, outside the ``with`` block, read everything.

A stage that reads its share must create its own inner iterators under :func:`no_worker_share` so
they are not split a second time.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = [
    "WorkerShare",
    "claim_worker_share",
    "current_worker",
    "enclosing_worker",
    "no_worker_share",
    "sequential_worker_share",
    "worker_share",
]


class WorkerShare:
    """This worker's ``index`` among ``count`` workers, whether its share is a contiguous block of
    the sources (``sequential``) rather than every ``count``-th index, and whether any stage took
    its share."""

    __slots__ = ("index", "count", "claimed", "sequential")

    def __init__(self, index: int, count: int, sequential: bool = False):
        if not 0 <= index < count:
            raise ValueError(f"worker index {index} is not in [0, {count}).")
        self.index, self.count, self.claimed = index, count, False
        self.sequential = bool(sequential)


_SHARE: contextvars.ContextVar[WorkerShare | None] = contextvars.ContextVar(
    "grain_core_worker_share", default=None
)
# The enclosing worker_share's (index, count), kept inside no_worker_share (see enclosing_worker).
_WORKER: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "grain_core_enclosing_worker", default=None
)


@contextlib.contextmanager
def worker_share(index: int, count: int, sequential: bool = False) -> Iterator[WorkerShare]:
    """Iterators created inside read worker ``index``'s share of ``count`` (a contiguous block of
    the sources when ``sequential``); yields the share, whose ``claimed`` says afterwards whether
    any stage could split its input."""
    share = WorkerShare(index, count, sequential)
    token = _SHARE.set(share)
    worker_token = _WORKER.set((share.index, share.count))
    try:
        yield share
    finally:
        _WORKER.reset(worker_token)
        _SHARE.reset(token)


@contextlib.contextmanager
def no_worker_share() -> Iterator[None]:
    """Iterators created inside read all their input (a stage's own inner iterators)."""
    token = _SHARE.set(None)
    try:
        yield
    finally:
        _SHARE.reset(token)


def claim_worker_share() -> tuple[int, int] | None:
    """``(index, count)`` if an iterator being created now should read only that share (and marks
    the share as taken), else None."""
    share = _SHARE.get()
    if share is None:
        return None
    share.claimed = True
    return share.index, share.count


def sequential_worker_share() -> bool:
    """Whether the share being read now is a contiguous block of the sources
    (``mp_prefetch(sequential_slice=True)``); stages that cannot read such a block read their
    strided share (as Grain's interleave does)."""
    share = _SHARE.get()
    return share is not None and share.sequential


def current_worker() -> tuple[int, int] | None:
    """``(index, count)`` of the worker whose iterator is being created now (outside
    :func:`no_worker_share`), else None; unlike :func:`claim_worker_share` it takes nothing. Grain's
    ``random_map`` reads the same context (its ``mp_context``) to number elements across workers."""
    share = _SHARE.get()
    return None if share is None else (share.index, share.count)


def enclosing_worker() -> tuple[int, int] | None:
    """``(index, count)`` of the worker whose pipeline is being built now, also inside
    :func:`no_worker_share` (a stage's own inner iterators are still that worker's), else None.
    Iterators record it when they are created: it is their ``_ctx.mp_context`` (Grain's
    ``MultiprocessingContext``, see :mod:`grain_core.dataset.grain_attrs`)."""
    return _WORKER.get()
