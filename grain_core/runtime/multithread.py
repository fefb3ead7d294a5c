"""``multithread_prefetch``: a pipeline's elements produced by a pool of threads.

Grain's thread-based alternative to ``mp_prefetch`` (meant for free-threaded Python). With
``num_threads == 0`` it returns ``ds`` unchanged. Otherwise thread ``i`` of ``K`` runs the pipeline
over its share -- created inside :func:`grain_core.dataset.sharing.worker_share` ``(i, K)``, exactly as
an ``mp_prefetch`` worker does, so ``to_iter_dataset`` reads indices ``i::K`` -- reading up to
``buffer_size`` elements ahead. The output is round-robin over the threads (thread 0's first
element, thread 1's first, ...), an exhausted thread being skipped from then on: for the same
pipeline it is the output of ``mp_prefetch`` with ``K`` workers.

State: ``{"kind", "num_workers", "workers": [per-thread state], "exhausted": [...], "next": i}``;
``set_state`` checks every thread's state against that thread's fresh state first
(:func:`grain_core.state.check_same_pipeline`), so a state from another pipeline changes nothing.
``close()`` stops and joins every thread.
"""

from __future__ import annotations

from typing import Any

from grain_core import state as _state
from grain_core.dataset.base import IterDataset
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.sharing import worker_share
from grain_core.runtime.thread_prefetch import ThreadPrefetchDatasetIterator
from grain_core.validation import check_instance, check_int

__all__ = ["MultithreadPrefetchIterDataset", "multithread_prefetch"]

_KIND = "MultithreadPrefetchDatasetIterator"


def multithread_prefetch(
    ds: IterDataset, num_threads: int, buffer_size: int, sequential_slice: bool = False
) -> IterDataset:
    """Returns ``ds`` produced by ``num_threads`` threads (see the module docstring).

    ``sequential_slice=True`` (Grain's option): each thread reads a contiguous block of the
    sources instead of a strided share, as ``mp_prefetch(sequential_slice=True)`` workers do
    (:mod:`grain_core.dataset.sequential`).
    """
    check_instance(ds, IterDataset, "multithread_prefetch", verb="expects")
    num_threads = check_int(num_threads, "multithread_prefetch num_threads")
    buffer_size = check_int(buffer_size, "multithread_prefetch buffer_size")
    if num_threads == 0:
        return ds
    return MultithreadPrefetchIterDataset(ds, num_threads, buffer_size, bool(sequential_slice))


class MultithreadPrefetchIterDataset(IterDataset):
    """``parent`` produced by ``num_threads`` threads, round-robin (see the module docstring)."""

    def __init__(
        self, parent: IterDataset, num_threads: int, buffer_size: int, sequential_slice: bool = False
    ):
        super().__init__(parent)
        self._sequential = bool(sequential_slice)
        self._parent = parent
        self._num_threads = check_int(num_threads, "num_threads", minimum=1)
        self._buffer_size = check_int(buffer_size, "buffer_size")

    def __iter__(self) -> DatasetIterator:
        return _MultithreadIterator(
            self._parent, self._num_threads, self._buffer_size, self._sequential
        )

    def __repr__(self) -> str:
        return f"MultithreadPrefetchIterDataset(num_threads={self._num_threads}, buffer_size={self._buffer_size})"


class _MultithreadIterator(DatasetIterator):
    def __init__(self, parent: IterDataset, k: int, buffer_size: int, sequential: bool = False):
        inner: list[DatasetIterator] = []
        try:
            for i in range(k):
                if k == 1:
                    it = iter(parent)
                else:
                    with worker_share(i, k, sequential=sequential) as share:
                        it = iter(parent)
                    if not share.claimed:
                        it.close()
                        raise ValueError(
                            "Cannot slice `IterDataset` source. multithread_prefetch cannot "
                            "split this pipeline between threads: no "
                            "stage reads a share of its input (it needs a MapDataset read by "
                            "to_iter_dataset, or a stage such as interleave)."
                        )
                inner.append(ThreadPrefetchDatasetIterator(it, buffer_size))
        except BaseException:
            for it in inner:
                it.close()
            raise
        super().__init__(inner)
        self._k = k
        self._templates = [it.get_state() for it in inner]
        self._exhausted = [False] * k
        self._next = 0

    def start_prefetch(self) -> None:
        for it in self._parents:
            it.start_prefetch()

    def __next__(self) -> Any:
        for _ in range(self._k):
            i = self._next
            if self._exhausted[i]:
                self._next = (i + 1) % self._k
                continue
            try:
                value = next(self._parents[i])
            except StopIteration:
                self._exhausted[i] = True
                self._next = (i + 1) % self._k
                continue
            self._next = (i + 1) % self._k
            return value
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        return _state.make_state(
            _KIND,
            num_workers=self._k,
            workers=[it.get_state() for it in self._parents],
            exhausted=list(self._exhausted),
            next=self._next,
        )

    def set_state(self, state: dict[str, Any]) -> None:
        _state.expect_state(state, _KIND, ("workers", "exhausted", "next"), num_workers=self._k)
        workers, exhausted = state["workers"], state["exhausted"]
        if len(workers) != self._k or len(exhausted) != self._k:
            raise _state.StateMismatchError(
                f"The state has {len(workers)} thread states; this pipeline runs {self._k} threads."
            )
        for i, (tmpl, s) in enumerate(zip(self._templates, workers)):
            _state.check_same_pipeline(tmpl, s, where=f"state.workers[{i}]")
        nxt = check_int(state["next"], "state next")
        with _state.rollback_on_error(self):
            for it, s in zip(self._parents, workers):
                it.set_state(s)
        self._exhausted = [bool(e) for e in exhausted]
        self._next = nxt % self._k
