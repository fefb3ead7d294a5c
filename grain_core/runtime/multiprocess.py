"""``IterDataset.mp_prefetch``: producing a pipeline's elements in workers of a runtime.

Contract (see ``docs/runtime.md``):

* ``num_workers == 0`` iterates the parent in this process (``iter(ds)`` is the parent's iterator).
* With ``K > 0`` workers, the selected runtime (``runtime=``: a :class:`~grain_core.runtime.api.Runtime`
  object, or the name a plugin registered it under with the ``register_runtimes`` hook; default
  ``"processes"``, :class:`~grain_core.runtime.processes.ProcessRuntime`, which the kernel's
  built-in plugin :mod:`grain_core.runtime.builtin` registers through that same hook) starts ``K``
  workers.
  Worker ``i`` receives the pipeline serialised with cloudpickle, runs ``worker_init_fn(i, K)``,
  builds its iterator inside :func:`grain_core.dataset.sharing.worker_share` ``(i, K)`` (so
  ``to_iter_dataset`` reads indices ``i::K``; a pipeline with no stage able to split its input is
  refused) and produces elements (:class:`~grain_core.runtime.api.WorkerLoop`). The output is
  round-robin over the workers (:class:`~grain_core.runtime.api.RoundRobinConsumer`); the order
  depends only on the pipeline and ``K``, never on timing or on the runtime.
* A worker holds at most ``per_worker_buffer_size`` finished elements not yet returned by
  ``next()``, plus the one it is producing; smaller elements may run further ahead while those
  ahead take under :data:`~grain_core.runtime.api.AHEAD_BYTES` (see :class:`~grain_core.runtime.api.WorkerLoop`).
* ``get_state()`` is JSON: per worker the state at the start of its current message plus how many of
  its elements were consumed, whether it is exhausted, and whose turn is next. It is the same for
  every runtime, so a checkpoint moves between runtimes. ``set_state`` keeps the workers and sends
  them the new position; a state of another pipeline is refused before anything changes; a state
  of another worker count is restored elastically where defined
  (:mod:`grain_core.dataset.elastic`).
* Failures: a worker exception is re-raised here (same type when it unpickles, with the worker's
  traceback and the output position in a note, else :class:`WorkerError`); a lost worker raises
  :class:`WorkerError`; ``close()``, ``with``, garbage collection and interpreter exit stop the
  workers and free what they hold. An exception raised into ``next()`` (Ctrl-C) leaves the iterator
  consistent.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

from grain_core.dataset.base import IterDataset
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.next_index import get_next_index, set_next_index
from grain_core.dataset.sharing import worker_share
from grain_core.options import MultiprocessingOptions
from grain_core.runtime.consumer import RoundRobinConsumer
from grain_core.runtime.job import WorkerJob
from grain_core.runtime.processes import START_METHOD_ENV
from grain_core.runtime.transport import Runtime, WorkerError
from grain_core.validation import check_instance

__all__ = [
    "DEFAULT_RUNTIME",
    "MultiprocessPrefetchDatasetIterator",
    "MultiprocessPrefetchIterDataset",
    "START_METHOD_ENV",
    "WorkerError",
    "resolve_runtime",
]

#: The runtime ``mp_prefetch`` uses when none is given.
DEFAULT_RUNTIME = "processes"


def default_multiprocessing_options() -> MultiprocessingOptions:
    """What ``mp_prefetch()`` uses without options: Grain's 10 workers, but never more workers than
    this machine has CPUs."""
    return MultiprocessingOptions(num_workers=min(10, os.cpu_count() or 1))


def resolve_runtime(runtime: Runtime | str | None) -> Runtime:
    """The runtime object for ``mp_prefetch(..., runtime=runtime)``: an object with
    ``start_workers(job)`` as it is; a name: one registered with the ``register_runtimes`` hook
    (the kernel's ``"processes"`` or a plugin's; the registered class or factory is called without
    arguments); None: ``"processes"``."""
    if runtime is None:
        runtime = DEFAULT_RUNTIME
    if isinstance(runtime, str):
        from grain_core.plugins.registry import PluginNameError, get_registry

        try:
            factory = get_registry().lookup("runtimes", runtime, "mp_prefetch runtime")
        except PluginNameError:
            known = get_registry().names("runtimes")
            raise ValueError(
                f"mp_prefetch: no runtime named {runtime!r}; known runtimes: {known}. A plugin "
                "adds one with the register_runtimes hook (see docs/writing-plugins.md)."
            ) from None
        runtime = factory()
    check_instance(
        runtime,
        Runtime,
        "mp_prefetch(runtime=...)",
        verb="takes",
        expected="a runtime name or an object with a start_workers(job) method",
    )
    return cast(Runtime, runtime)


class MultiprocessPrefetchIterDataset(IterDataset):
    """``parent`` produced by ``options.num_workers`` workers of a runtime; see the module
    docstring."""

    def __init__(
        self,
        parent: IterDataset,
        multiprocessing_options: MultiprocessingOptions | None = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
        runtime: Runtime | str | None = None,
        sequential_slice: bool = False,
    ):
        check_instance(
            parent, IterDataset, "mp_prefetch", verb="needs", expected="an IterDataset parent"
        )
        if multiprocessing_options is None:
            multiprocessing_options = default_multiprocessing_options()
        check_instance(multiprocessing_options, MultiprocessingOptions, "multiprocessing_options")
        super().__init__(parent)
        self.multiprocessing_options = multiprocessing_options
        self.worker_init_fn = worker_init_fn
        #: Workers read contiguous blocks of the sources (:mod:`grain_core.dataset.sequential`).
        self.sequential_slice = bool(sequential_slice)
        #: ``(dataset) -> (iterator, report)`` the workers build their iterators with; set by
        #: ``grain_core.stats`` on its instrumented copy (workers then report statistics).
        self.stats_hook: Callable[[Any], tuple[Any, Callable[[], Any]]] | None = None
        self.runtime = resolve_runtime(runtime) if isinstance(runtime, str) else runtime
        if self.runtime is not None:
            resolve_runtime(self.runtime)  # an early error for an object that is no runtime

    def __iter__(self) -> DatasetIterator:
        return self.iterator(self.stats_hook)

    def iterator(
        self, stats_hook: Callable[[Any], tuple[Any, Callable[[], Any]]] | None = None
    ) -> DatasetIterator:
        """``iter(self)``; with ``stats_hook`` (the statistics hook of ``grain_core.stats``) the
        workers build their iterators with it and report their counters
        (:meth:`RoundRobinConsumer.worker_stats`)."""
        if self.multiprocessing_options.num_workers == 0:
            return iter(self._parents[0])
        return MultiprocessPrefetchDatasetIterator(
            self._parents[0],
            self.multiprocessing_options,
            self.worker_init_fn,
            runtime=self.runtime,
            stats_hook=stats_hook,
            sequential_slice=self.sequential_slice,
        )


class MultiprocessPrefetchDatasetIterator(RoundRobinConsumer):
    """Round-robin over ``num_workers`` workers of a runtime; see the module docstring.

    Workers start when the iterator is created; they produce elements from the first ``next()`` /
    ``start_prefetch()`` on, at the position last given by ``set_state``.
    """

    def __init__(
        self,
        parent: IterDataset,
        options: MultiprocessingOptions,
        worker_init_fn: Callable[[int, int], None] | None = None,
        *,
        runtime: Runtime | str | None = None,
        stats_hook: Callable[[Any], tuple[Any, Callable[[], Any]]] | None = None,
        sequential_slice: bool = False,
    ):
        job = WorkerJob.create(
            parent, options, worker_init_fn, stats_hook, sequential_slice=sequential_slice
        )
        pool = resolve_runtime(runtime).start_workers(job)
        super().__init__(pool, job, parent, collect_stats=stats_hook is not None)

    def _get_next_index(self) -> int:
        """As in Grain, with one worker: the next index of the pipeline at this iterator's
        position, found on an in-process iterator of it (moved to the worker's state)."""
        it = self._in_process_copy("get_next_index")
        try:
            return get_next_index(it)
        finally:
            it.close()

    def _set_next_index(self, index: int) -> None:
        it = self._in_process_copy("set_next_index")
        try:
            set_next_index(it, index)
            state = self.get_state()
            worker = {**state["workers"][0], "state": it.get_state(), "skip": 0, "exhausted": False}
            self.set_state({**state, "next_worker": 0, "workers": [worker]})
        finally:
            it.close()

    def _in_process_copy(self, what: str) -> DatasetIterator:
        if self._k != 1:
            raise NotImplementedError(
                f"{what} is only supported for mp_prefetch with one worker, not {self._k}."
            )
        worker = self.get_state()["workers"][0]
        with worker_share(0, 1, sequential=self._job.sequential_slice):  # as the worker builds it
            it = iter(self._parent_ds)
        try:
            if worker.get("state") is not None:
                it.set_state(worker["state"])
            for _ in range(int(worker.get("skip", 0))):
                next(it)
        except BaseException:
            it.close()
            raise
        return it

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers (process runtime; for monitoring and tests)."""
        return list(getattr(self.pool, "worker_pids", []))
