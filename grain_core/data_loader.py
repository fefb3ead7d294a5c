"""``DataLoader``: a data source, a sampler and a flat list of transforms, run as a Dataset pipeline.

The loader is a thin layer over the Dataset kernel. It builds::

    _SamplerSourceMapDataset   position i -> data_source[sampler[i * shard_count + shard_index]]
                               (bulk reads; shard options are the loader's, else the sampler's)
    _OperationsMapDataset      the leading Map / RandomMap / MapWithIndex / Filter operations, each
                               record seeing its sampler metadata (index, rng)
    .batch(...)                the first Batch, when no Filter or FlatMap precedes it and there
                               are no workers
    .to_iter_dataset(read_options)
    .apply(rest)               the operations from the first FlatMap (or filtered Batch) on
    .mp_prefetch(MultiprocessingOptions(worker_count, worker_buffer_size))   when worker_count > 0

so threads, worker processes and checkpointing all come from the kernel and the runtime. With workers
each worker reads every ``worker_count``-th element of the ``MapDataset`` stage and runs the rest of
the pipeline, batching included, itself; batches come from the workers in turn. This is Grain's
order: ``range(8)``, ``Batch(4)`` and 2 workers give ``[0, 2, 4, 6]``, ``[1, 3, 5, 7]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from grain_core import global_config as _config
from grain_core import grain_states as _grain_states
from grain_core import state as _state
from grain_core import transforms as tr
from grain_core.data_loader_stages import (
    _check_operations,
    _OperationsMapDataset,
    _record_data,
    _RecordsMapDataset,
    _SamplerSourceMapDataset,
)
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.concurrency import guard_class
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.map_ops import source_identity
from grain_core.dataset.read_threads import available_cpus, read_threads
from grain_core.operations import apply_on_records, is_custom_operation
from grain_core.options import MultiprocessingOptions, ReadOptions
from grain_core.runtime.api import next_or_rollback
from grain_core.runtime.multiprocess import resolve_runtime
from grain_core.sharding import ShardOptions

__all__ = ["DataLoader", "DataLoaderIterator", "default_read_options"]

_STATE_KIND = "DataLoaderIterator"
_STATE_VERSION = 1

#: The most read threads the default ``ReadOptions`` of a ``DataLoader`` gives one process.
MAX_DEFAULT_READ_THREADS = 16


def default_read_options(worker_count: int = 0) -> ReadOptions:
    """The ``ReadOptions`` a ``DataLoader`` uses when given none.

    Each process that reads (the main one, or each of ``worker_count`` workers) gets
    ``min(16, cpus // max(1, worker_count))`` threads, where ``cpus`` is the number of CPUs this
    process may run on, and none (it reads in its own thread) when that share is a single CPU: one
    read thread adds no parallelism, only hand-offs, and Grain's fixed 16 threads per worker
    oversubscribe small machines (2 workers x 16 threads on 2 cores). Pass ``read_options=ReadOptions(num_threads=...)`` for
    I/O-bound sources that profit from more threads than cores. The prefetch buffer stays at
    ``ReadOptions``' default. The element order never depends on the thread count.
    """
    threads = read_threads(
        MAX_DEFAULT_READ_THREADS, cpu_bound=True, workers=worker_count, cpus=available_cpus()
    )
    return ReadOptions(num_threads=threads)


class DataLoader:
    """Reads ``data_source`` in the order of ``sampler``, applies ``operations`` and batches.

    Args:
      data_source: a ``RandomAccessDataSource`` (``len`` and ``[]``); used as a context manager
        while iterating when it is one.
      sampler: an ``IndexSampler`` (or any ``Sampler``); its ``num_records`` may be smaller than
        ``len(data_source)`` (the first records are read), not larger.
      operations: ``Map``, ``RandomMap``, ``MapWithIndex``, ``Filter``, ``FlatMap`` and ``Batch``
        objects, applied in order; legacy ``Operation``s (callables over an iterator of
        ``Record``s, see :mod:`grain_core.operations`) too.
      worker_count: worker processes (0 reads in this process).
      worker_buffer_size: elements each worker may hold ahead of the consumer.
      shard_options: which positions of the sampler's stream this process reads (every
        ``shard_count``-th, starting at ``shard_index``); by default the sampler's
        ``shard_options`` (as in Grain), else no sharding.
      read_options: threads and read-ahead of each process; by default
        :func:`default_read_options` (at most 16 threads per process, fewer on small machines).
      enable_profiling: log per-worker timings.
      runtime: where the ``worker_count`` workers run, exactly as ``mp_prefetch(..., runtime=)``:
        a runtime object (e.g. ``grain_plugin_ray.RayRuntime(...)``) or a registered runtime name;
        None: local processes. The elements, their order and the state do not depend on it.
        Unused when ``worker_count`` is 0.
    """

    def __init__(
        self,
        *,
        data_source: Any,
        sampler: Any,
        operations: Sequence[Any] = (),
        worker_count: int | None = 0,
        worker_buffer_size: int = 1,
        shard_options: ShardOptions | None = None,
        read_options: ReadOptions | None = None,
        enable_profiling: bool = False,
        runtime: Any = None,
    ):
        if not (hasattr(data_source, "__len__") and hasattr(data_source, "__getitem__")):
            raise TypeError(
                "DataLoader data_source must support len() and [] (a RandomAccessDataSource), got "
                f"{type(data_source).__name__}."
            )
        if not hasattr(sampler, "__getitem__"):
            raise TypeError(
                f"DataLoader sampler must be an IndexSampler or Sampler, got {type(sampler).__name__}."
            )
        num_records = getattr(sampler, "num_records", None)
        if num_records is not None and num_records > len(data_source):
            raise ValueError(
                f"The sampler has num_records={num_records} but the data source has only "
                f"{len(data_source)} records; build the sampler with num_records <= "
                "len(data_source)."
            )
        self._operations = _check_operations(operations)
        worker_count = 0 if worker_count is None else worker_count
        if isinstance(worker_count, int) and worker_count < 0:  # Grain's wording
            raise ValueError(
                "Worker count should be greater than or equal zero. Current worker_count is "
                f"{worker_count}; pass 0 to read in this process."
            )
        self._mp_options = MultiprocessingOptions(
            num_workers=worker_count,
            per_worker_buffer_size=worker_buffer_size,
            enable_profiling=bool(enable_profiling),
        )
        if read_options is None:
            read_options = default_read_options(self._mp_options.num_workers)
        if not isinstance(read_options, ReadOptions):
            raise TypeError(f"read_options must be a ReadOptions, got {type(read_options).__name__}.")
        if shard_options is not None and not isinstance(shard_options, ShardOptions):
            raise TypeError(
                f"shard_options must be a ShardOptions, got {type(shard_options).__name__}."
            )
        if shard_options is None:
            shard_options = getattr(sampler, "shard_options", None)
            if not isinstance(shard_options, ShardOptions):
                shard_options = getattr(sampler, "_shard_options", None)
            if not isinstance(shard_options, ShardOptions):
                shard_options = ShardOptions(0, 1)
        for i, op in enumerate(self._operations):
            if tr.is_kind(op, tr.RandomMap) and getattr(sampler, "rng_seed", 0) is None:
                raise ValueError(
                    f"DataLoader operations[{i}] is a RandomMap, but the sampler has no seed to "
                    "draw per-record random generators from. Pass seed= to the IndexSampler."
                )
        self._data_source = data_source
        self._sampler = sampler
        self._shard_options = shard_options
        self._read_options = read_options
        if runtime is not None:
            resolve_runtime(runtime)  # an early error for an unknown name or an object no runtime
        self._runtime = runtime
        self._built_grain_exact = _config.grain_exact()  # the mode (see checkpoint/dataloader_mode)
        self._dataset = self._build(data_source)

    @property
    def data_source(self) -> Any:
        return self._data_source

    @property
    def sampler(self) -> Any:
        return self._sampler

    @property
    def operations(self) -> list[Any]:
        return list(self._operations)

    @property
    def worker_count(self) -> int:
        return self._mp_options.num_workers

    @property
    def multiprocessing_options(self) -> MultiprocessingOptions:
        return self._mp_options

    @property
    def read_options(self) -> ReadOptions:
        return self._read_options

    @property
    def _multiprocessing_options(self) -> MultiprocessingOptions:
        """Grain's private name of :attr:`multiprocessing_options` (Keras's Grain adapter rebuilds
        a loader from ``_data_source``, ``_sampler``, ``_operations``, this, ``_shard_options``
        and ``_read_options``, which hold what Grain's do)."""
        return self._mp_options

    @property
    def dataset(self) -> IterDataset:
        """The ``IterDataset`` pipeline this loader runs."""
        return self._dataset

    def _build(self, source: Any, remaining: Any = None) -> IterDataset:
        """The pipeline over ``source``; with ``remaining`` (a ``dataloader_elastic.Remaining``) it
        reads only those stream positions (a state restored on another worker count)."""
        ops = self._operations
        if any(is_custom_operation(op) for op in ops):
            return self._build_records(source)
        split = next(
            (i for i, op in enumerate(ops) if tr.is_kind(op, tr.FlatMap, tr.Batch)), len(ops)
        )
        ds: MapDataset = _SamplerSourceMapDataset(self._sampler, source, self._shard_options)
        if split:
            ds = _OperationsMapDataset(ds, ops[:split], self._sampler, self._shard_options)
        self._stream_len = len(ds)
        if remaining is not None:
            ds = remaining.wrap(ds)
        rest = ops[split:]
        filtered = any(tr.is_kind(op, tr.Filter) for op in ops[:split])
        workers = self._mp_options.num_workers > 0
        self._map_batch_size = None
        if rest and tr.is_kind(rest[0], tr.Batch) and not filtered and not workers:
            b = rest[0]
            self._map_batch_size = b.batch_size
            ds = ds.batch(b.batch_size, drop_remainder=b.drop_remainder, batch_fn=b.batch_fn)
            rest = rest[1:]
        it_ds = ds.to_iter_dataset(self._read_options)
        if rest:
            it_ds = it_ds.apply(rest)
        if self._mp_options.num_workers > 0:
            it_ds = it_ds.mp_prefetch(self._mp_options, runtime=self._runtime)
        return it_ds

    def _build_records(self, source: Any) -> IterDataset:
        """With a custom legacy ``Operation``: Grain's record pipeline (see
        :mod:`grain_core.operations`), per worker when there are workers."""
        self._map_batch_size = None
        ds = _SamplerSourceMapDataset(self._sampler, source, self._shard_options)
        self._stream_len = len(ds)
        records = _RecordsMapDataset(ds, self._sampler, self._shard_options)
        it_ds = records.to_iter_dataset(self._read_options)
        it_ds = apply_on_records(it_ds, self._operations, self._shard_options.shard_count)
        it_ds = it_ds.map(_record_data)
        if self._mp_options.num_workers > 0:
            it_ds = it_ds.mp_prefetch(self._mp_options)
        return it_ds

    def __iter__(self) -> DataLoaderIterator:
        return DataLoaderIterator(self)

    def __repr__(self) -> str:
        ops = ", ".join(tr.transform_name(op) for op in self._operations)
        return (
            f"DataLoader(data_source={source_identity(self._data_source)}, "
            f"sampler={self._sampler!r}, operations=[{ops}], "
            f"worker_count={self._mp_options.num_workers}, "
            f"worker_buffer_size={self._mp_options.per_worker_buffer_size})"
        )


def _is_context_manager(obj: Any) -> bool:
    cls = type(obj)
    return hasattr(cls, "__enter__") and hasattr(cls, "__exit__")


class DataLoaderIterator:
    """Iterates a ``DataLoader``. ``get_state()`` returns JSON bytes; ``set_state(bytes)`` resumes
    exactly there. The data source is entered once when iteration starts and exited at the end or on
    ``close()``."""

    def __init__(
        self, data_loader: DataLoader, state: bytes | None = None, validate_state: bool = True
    ):
        """``iter(data_loader)``; with ``state``, positioned there (Grain's signature; states are
        always validated, ``validate_state`` is accepted for compatibility)."""
        self._loader = data_loader
        self._source_entered = False
        self._finished = False
        self._closed = False
        self._last_state: dict[str, Any] | None = None
        self._it: DatasetIterator | None = None
        self._plain_it: Any = None  # _it once found to have no rollback marks (see __next__)
        self._remaining: Any = None  # dataloader_elastic.Remaining after a restore on another count
        self._read_from: Any = data_loader.data_source
        self._open()
        if state is not None:
            self.set_state(state)

    def _open(self) -> None:
        loader = self._loader
        source = loader.data_source
        self._read_from = source
        if _is_context_manager(source):
            entered = source.__enter__()
            self._source_entered = True
            if (
                entered is not None
                and entered is not source
                and hasattr(entered, "__getitem__")
                and hasattr(entered, "__len__")
            ):
                self._read_from = entered
        try:
            self._it = iter(self._dataset(self._remaining))
        except BaseException:
            self._exit_source()
            raise
        self._finished = False
        self._closed = False

    def _dataset(self, remaining: Any) -> IterDataset:
        loader = self._loader
        if remaining is None and self._read_from is loader.data_source:
            return loader.dataset
        return loader._build(self._read_from, remaining)

    def _exit_source(self) -> None:
        if self._source_entered:
            self._source_entered = False
            self._loader.data_source.__exit__(None, None, None)

    def _release(self) -> None:
        """Keeps the pipeline's last state, then closes it. Ctrl-C while the state is taken leaves
        everything open as it was (the next call releases again); any other error still closes."""
        it, self._plain_it = self._it, None
        if it is None:
            self._exit_source()
            return
        try:
            self._last_state = it.get_state()
        except Exception:
            self._it = None
            try:
                it.close()
            finally:
                self._exit_source()
            raise
        self._it = None
        try:
            it.close()
        finally:
            self._exit_source()

    def __iter__(self) -> DataLoaderIterator:
        return self

    def __next__(self) -> Any:
        it = self._it
        if it is None:
            if self._closed:
                raise RuntimeError("This DataLoaderIterator was closed; call iter(loader) again.")
            raise StopIteration
        try:
            if it is self._plain_it:  # what next_or_rollback does for it, without its frame
                return it.__next__()
            if not hasattr(it, "rollback_mark"):
                self._plain_it = it
            return next_or_rollback(it)  # Ctrl-C here never loses an element
        except StopIteration:
            self._finished = True
            self._release()
            raise

    # --- state ------------------------------------------------------------------------------------

    def _inner_state(self) -> dict[str, Any]:
        if self._it is not None:
            return self._it.get_state()
        if self._last_state is None:
            raise RuntimeError("This DataLoaderIterator was closed before it produced a state.")
        return self._last_state

    def get_state(self) -> bytes:
        """The position as JSON-encoded bytes."""
        from grain_core.checkpoint.dataloader_mode import loader_mode_fields

        extra: dict[str, Any] = loader_mode_fields(self._loader)  # {"data_mode": "correct"}
        if getattr(self._loader, "_grain_original", None) is not None:
            extra["from_grain"] = True  # switched to Grain's data by a google grain state
        if self._remaining is not None and not self._remaining.is_whole:
            extra["remaining"] = self._remaining.to_state()
        state = _state.make_state(
            _STATE_KIND,
            version=_STATE_VERSION,
            sampler=repr(self._loader.sampler),
            worker_count=self._loader.worker_count,
            iterator=self._inner_state(),
            **extra,
        )
        return json.dumps(state, sort_keys=True, allow_nan=False).encode("utf-8")

    def set_state(self, state: bytes | str | dict[str, Any]) -> None:
        """Moves to the position of a state from ``get_state()`` of a loader like this one."""
        if isinstance(state, (bytes, bytearray, str)):
            try:
                state = json.loads(state)
            except ValueError as e:
                raise _state.StateMismatchError(
                    f"DataLoaderIterator.set_state expects the bytes returned by get_state(): {e}"
                ) from e
        if _grain_states.is_grain_dataloader_state(state):
            self._set_grain_state(state)  # type: ignore[arg-type]
            return
        _state.expect_state(
            state,
            _STATE_KIND,
            ("iterator", "version"),
            version=_STATE_VERSION,
            sampler=repr(self._loader.sampler),
        )
        from grain_core.checkpoint import dataloader_elastic, dataloader_mode

        loader = self._loader  # a state continuing a google grain one reads Grain's data
        if state.get(dataloader_mode.FROM_GRAIN_FIELD):  # type: ignore[union-attr]
            target = dataloader_mode.grain_exact_loader(loader)
        else:
            target = getattr(loader, "_grain_original", None) or loader
        before = self._it.get_state() if target is not loader and self._it is not None else None
        self._switch_loader(target)
        try:
            dataloader_mode.check_loader_state_mode(self._loader, state)  # type: ignore[arg-type]
            if self._it is None:
                self._open()
            assert self._it is not None and isinstance(state, Mapping)  # expect_state checked

            # Another worker count: the positions still to read, re-split (docs/dataloader.md).
            remaining, inner = dataloader_elastic.plan(self._loader, self._read_from, state)
            self._replace(None if remaining.is_whole else remaining, inner)
        except BaseException:
            self._roll_back(target, loader, before)
            raise

    def _roll_back(self, switched_to: Any, loader: Any, before: Any) -> None:
        """After a refused restore: back to ``loader`` (if the restore had switched to another
        loader) and to the position ``before`` it had."""
        if switched_to is not loader:
            self._switch_loader(loader)
            if before is not None and self._it is not None:
                self._it.set_state(before)

    def _replace(self, remaining: Any, inner: Any) -> None:
        """Continues at ``inner`` (None: the start) of the pipeline over ``remaining``; a state
        refused leaves this iterator as it was."""
        assert self._it is not None
        if inner is not None and remaining == self._remaining:
            self._it.set_state(inner)
            return
        new = iter(self._dataset(remaining))
        try:
            if inner is not None:
                new.set_state(inner)
        except BaseException:
            new.close()
            raise
        old, self._it, self._remaining = self._it, new, remaining
        old.close()

    def _switch_loader(self, loader: DataLoader) -> None:
        """Continues with ``loader``'s pipeline (the same loader read in the other data mode; see
        ``checkpoint/dataloader_mode``) from its start; a failure leaves this iterator as it was."""
        previous = self._loader
        if loader is previous:
            return
        self._loader = loader
        try:
            new = iter(self._dataset(None)) if self._it is not None else None
        except BaseException:
            self._loader = previous
            raise
        old, self._it, self._remaining = self._it, new, None
        if old is not None:
            old.close()

    def _set_grain_state(self, state: dict[str, Any]) -> None:
        """Restores the JSON state a Grain ``DataLoaderIterator`` saved (same loader definition)."""
        loader = self._loader
        if state["sampler"] != repr(loader.sampler):
            raise _state.StateMismatchError(
                "Sampler in checkpoint does not match dataloader sampler.\n"
                f"sampler in checkpoint: {state['sampler']}\n"
                f"sampler in dataloader: {loader.sampler!r}"
            )
        from grain_core.checkpoint.dataloader_mode import grain_exact_loader

        exact = grain_exact_loader(loader)  # Grain's data (or refused, saying why)
        so = exact._shard_options
        shards = {"shard_index": so.shard_index, "shard_count": so.shard_count}
        if exact.worker_count:  # converted first: a state refused here changes nothing
            inner = _grain_states.dataloader_mp_state(
                state, worker_count=exact.worker_count, **shards
            )
        else:
            position = _grain_states.dataloader_next_indices(state, worker_count=0, **shards)[0]
            if exact._map_batch_size:
                position = -(-position // exact._map_batch_size)
            inner = {"next_index": position}
        before = self._it.get_state() if exact is not loader and self._it is not None else None
        self._switch_loader(exact)
        try:
            if self._it is None:
                self._open()
            assert self._it is not None
            if self._remaining is not None:
                self._replace(None, None)
            self._it.set_state(inner)
        except BaseException:
            self._roll_back(exact, loader, before)
            raise

    def start_prefetch(self) -> None:
        """Starts producing elements in the background (e.g. while a model restores). Idempotent."""
        if self._it is not None:
            self._it.start_prefetch()

    def save(self, directory: Any) -> Any:
        """Returns a coroutine writing ``get_state()`` as of this call into ``directory`` (Orbax)."""
        from grain_core.checkpoint import save_iterator_state

        return save_iterator_state(self, directory)

    async def load(self, directory: Any) -> None:
        """Reads a state written by :meth:`save` from ``directory`` and sets it."""
        from grain_core.checkpoint import load_iterator_state

        await load_iterator_state(self, directory)

    def close(self) -> None:
        """Stops workers and threads and exits the data source's context. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._release()

    def __enter__(self) -> DataLoaderIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"DataLoaderIterator({self._loader!r})"


# One thread at a time: a second thread calling these while another is inside gets
# ConcurrentIteratorUseError (grain_core.dataset.concurrency), never a hang.
guard_class(DataLoaderIterator, ("__next__", "get_state", "set_state"))
