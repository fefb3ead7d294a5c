"""``multithread_prefetch``: a pipeline's elements produced by a pool of threads.

Grain's thread-based alternative to ``mp_prefetch`` (meant for free-threaded Python). With
``num_threads == 0`` it returns ``ds`` unchanged. Otherwise thread ``i`` of ``K`` runs the pipeline
over its share -- created inside :func:`grain_core.dataset.sharing.worker_share` ``(i, K)``, exactly as
an ``mp_prefetch`` worker does, so ``to_iter_dataset`` reads indices ``i::K`` -- reading up to
``buffer_size`` elements ahead. The output is round-robin over the threads (thread 0's first
element, thread 1's first, ...), an exhausted thread being skipped from then on: for the same
pipeline it is the output of ``mp_prefetch`` with ``K`` workers.

The turn order and the state are the one round-robin of :mod:`grain_core.runtime.round_robin`
(``mp_prefetch``'s consumer uses the same): ``{"kind": "MultithreadPrefetchDatasetIterator",
"num_workers", "next_worker", "position", "workers": [{"state", "skip", "exhausted"}, ...]}``, each
``state`` being that thread's share pipeline's own state (as an ``mp_prefetch`` worker's is).
``set_state`` checks every share's state against that share's fresh state first
(:func:`grain_core.state.check_same_pipeline`), so a state from another pipeline changes nothing.
It still reads the layout written before (``"workers"`` holding the thread-prefetch states,
``"exhausted"`` and ``"next"``). ``close()`` stops and joins every thread.
"""

from __future__ import annotations

from typing import Any

from grain_core import state as _state
from grain_core.dataset.base import IterDataset
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.sharing import worker_share
from grain_core.runtime import round_robin
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
        # Each thread's fresh thread-prefetch state (its "parent" is the share pipeline's state).
        self._templates = [it.get_state() for it in inner]
        self._exhausted = [False] * k
        self._next = 0
        self._position = 0  # output elements returned

    def start_prefetch(self) -> None:
        for it in self._parents:
            it.start_prefetch()

    def __next__(self) -> Any:
        for _ in range(self._k):
            i = self._next
            after = round_robin.turn_after(i, self._k)
            if self._exhausted[i]:
                self._next = after
                continue
            try:
                value = next(self._parents[i])
            except StopIteration:
                self._exhausted[i] = True
                self._next = after
                continue
            self._next = after
            self._position += 1
            return value
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        shares = [
            round_robin.Share(it.get_state()["parent"], 0, exhausted)
            for it, exhausted in zip(self._parents, self._exhausted)
        ]
        return round_robin.make_state(_KIND, self._next, self._position, shares)

    def set_state(self, state: dict[str, Any]) -> None:
        if isinstance(state, dict) and "next" in state and "next_worker" not in state:
            state = self._from_first_layout(state)
        saved = round_robin.read_state(state, _KIND, self._k, lambda i: self._templates[i]["parent"])
        exhausted = [share.exhausted for share in saved.shares]
        with _state.rollback_on_error(self):
            for i, (it, tmpl, share) in enumerate(zip(self._parents, self._templates, saved.shares)):
                it.set_state({**tmpl, "parent": tmpl["parent"] if share.state is None else share.state})
                for _ in range(share.skip):
                    try:
                        next(it)
                    except StopIteration:
                        exhausted[i] = True
                        break
        self._exhausted = exhausted
        self._next = saved.next_worker
        self._position = saved.position

    def _from_first_layout(self, state: dict[str, Any]) -> dict[str, Any]:
        """A state in the layout written before the shared round-robin format, converted."""
        _state.expect_state(state, _KIND, ("workers", "exhausted", "next"), num_workers=self._k)
        workers, exhausted = state["workers"], state["exhausted"]
        if (
            not isinstance(workers, list)
            or not isinstance(exhausted, list)
            or len(workers) != self._k
            or len(exhausted) != self._k
        ):
            raise _state.StateMismatchError(
                f"The state's workers and exhausted must be lists of {self._k} entries (this "
                f"pipeline runs {self._k} threads), got {workers!r} and {exhausted!r}."
            )
        for i, w in enumerate(workers):
            _state.check_same_pipeline(self._templates[i], w, where=f"state.workers[{i}]")
            if not isinstance(w, dict) or "parent" not in w:
                raise _state.StateMismatchError(f"Malformed thread state at state.workers[{i}]: {w!r}")
        nxt = check_int(state["next"], "state next")
        return round_robin.make_state(
            _KIND,
            nxt % self._k,
            0,
            [round_robin.Share(w["parent"], 0, bool(e)) for w, e in zip(workers, exhausted)],
        )
