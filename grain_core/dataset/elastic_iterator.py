"""``ElasticIterator``: batches of a sharded ``MapDataset`` whose state restores on any shard count.

Grain's contract (``grain.experimental.ElasticIterator``): the input is an unbatched, unsharded
``MapDataset`` ``ds``; the iterator does the sharding and the batching itself. After ``k`` steps,
every shard has consumed the first ``k * global_batch_size`` elements of ``ds`` together, so every
shard's state is the same one number, ``global_next_index``. Shard ``i`` of ``n`` then reads
``ds[global_next_index + i :: n]`` in batches of ``global_batch_size // n`` (the last, incomplete
batch is dropped). Restoring that state into iterators over another number of shards -- or with
another global batch size -- continues with exactly the elements not yet consumed.

``filter`` in ``ds`` is refused (a dropped element would shift every later position); so are a
``global_batch_size`` that the shard count does not divide and a ``ds`` that is not a
``MapDataset``.

State: ``{"kind": "ElasticIterator", "global_next_index": int, "length": len(ds)}``. ``set_state``
also accepts Grain's ``{"global_next_index": int}``, so a checkpoint written by Grain's
``ElasticIterator`` resumes here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from grain_core import state as _state
from grain_core.dataset import dataset_tree
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.map_ops import FilterMapDataset
from grain_core.options import MultiprocessingOptions, ReadOptions
from grain_core.sharding import ShardOptions
from grain_core.validation import check_instance, check_int

__all__ = ["ElasticIterator"]

_KIND = "ElasticIterator"
_KEY = "global_next_index"


def _check(ds: Any, global_batch_size: Any, shard_options: Any) -> int:
    check_instance(
        ds,
        MapDataset,
        "ElasticIterator",
        verb="expects",
        expected="an unbatched, unsharded MapDataset",
        hint=" Build the pipeline as a MapDataset (ElasticIterator shards and batches it itself).",
    )
    for d in dataset_tree(ds):
        if isinstance(d, FilterMapDataset):
            raise ValueError("ElasticIterator does not support `filter` transformation.")
    check_instance(
        shard_options,
        ShardOptions,
        "ElasticIterator shard_options",
        expected="a grain_core.sharding.ShardOptions (e.g. "
        "ShardOptions(shard_index=..., shard_count=...))",
    )
    size = check_int(global_batch_size, "ElasticIterator global_batch_size", minimum=1)
    if size % shard_options.shard_count:
        raise ValueError(
            f"Global batch size {size} is not divisible by shard count "
            f"{shard_options.shard_count}. Choose a global batch size that is a multiple of the "
            "number of shards."
        )
    return size


class _ElasticDatasetIterator(DatasetIterator):
    """Reads shard ``shard_index`` of ``ds`` from ``global_next_index`` on, one batch per step."""

    def __init__(
        self,
        ds: MapDataset,
        global_batch_size: int,
        shard_options: ShardOptions,
        read_options: ReadOptions,
        multiprocessing_options: MultiprocessingOptions | None,
    ):
        super().__init__()
        self._ds = ds
        self._global_batch_size = global_batch_size
        self._shard = shard_options
        self._read_options = read_options
        self._mp = multiprocessing_options
        self._global_next_index = 0
        self._length = len(ds)

    @functools.cached_property
    def _iterator(self) -> DatasetIterator:
        n = self._shard.shard_count
        shard = self._ds[self._global_next_index + self._shard.shard_index :: n]
        batched = shard.batch(self._global_batch_size // n, drop_remainder=True)
        it_ds = batched.to_iter_dataset(read_options=self._read_options)
        if self._mp is not None:
            it_ds = it_ds.mp_prefetch(self._mp)
        return iter(it_ds)

    def __next__(self) -> Any:
        batch = next(self._iterator)
        self._global_next_index += self._global_batch_size
        return batch

    def get_state(self) -> dict[str, Any]:
        return _state.make_state(
            _KIND, global_next_index=self._global_next_index, length=self._length
        )

    def set_state(self, state: Mapping[str, Any]) -> None:
        check_instance(
            state, Mapping, "set_state", verb="expects", expected="the dict returned by get_state()"
        )
        if "kind" in state:  # grain_core's state; Grain's has only global_next_index
            _state.expect_state(state, _KIND, (_KEY,))
            if "length" in state and state["length"] != self._length:
                raise _state.StateMismatchError(
                    f"The ElasticIterator state was saved over a dataset of {state['length']} "
                    f"elements, but this dataset has {self._length}: it comes from another pipeline."
                )
        elif _KEY not in state:
            raise _state.StateMismatchError(
                f"An ElasticIterator state needs {_KEY!r}; got keys {sorted(state)}."
            )
        index = check_int(state[_KEY], f"ElasticIterator state {_KEY}")
        self._close_inner()
        self._global_next_index = index

    def state_for_process_count(
        self, states: list[Any], process_index: int, process_count: int
    ) -> dict[str, Any]:
        """The state to restore when ``states`` were saved by ``len(states)`` processes and this job
        runs ``process_count``: every shard saved the same position, so any of them (checked equal)."""
        positions = {s.get(_KEY) if isinstance(s, Mapping) else None for s in states}
        if len(positions) != 1 or None in positions:
            raise ValueError(
                f"the ElasticIterator states of the {len(states)} processes are at different "
                f"positions {sorted(map(str, positions))}; ElasticIterator restores elastically only "
                "when every shard advanced the same number of steps."
            )
        return dict(states[0])

    def _close_inner(self) -> None:
        inner = self.__dict__.pop("_iterator", None)
        if inner is not None:
            inner.close()

    def start_prefetch(self) -> None:
        self._iterator.start_prefetch()

    def close(self) -> None:
        self._close_inner()


class ElasticIterator(IterDataset):
    """Shards and batches ``ds``; its state restores across changes of shard count and batch size.

    Args:
      ds: an unbatched, unsharded ``MapDataset`` without ``filter``.
      global_batch_size: elements per step over all shards; each shard's batches hold
        ``global_batch_size // shard_options.shard_count`` elements.
      shard_options: which shard this iterator reads (``ShardOptions``, ``ShardByJaxProcess``, ...).
      read_options: how the shard is read (threads, read-ahead), as for ``to_iter_dataset``.
      multiprocessing_options: if given, batches are produced by worker processes
        (``mp_prefetch``) without changing them.

    Like Grain's, it is its own one-shot iterator: ``iter(it)`` always returns the same underlying
    iterator, and ``next(it)``, ``get_state()``, ``set_state()`` and ``close()`` act on it.
    """

    def __init__(
        self,
        ds: MapDataset,
        global_batch_size: int,
        shard_options: ShardOptions,
        *,
        read_options: ReadOptions = ReadOptions(),  # noqa: B008 - frozen dataclass, Grain's default
        multiprocessing_options: MultiprocessingOptions | None = None,
    ):
        self._global_batch_size = _check(ds, global_batch_size, shard_options)
        check_instance(read_options, ReadOptions, "read_options")
        check_instance(
            multiprocessing_options,
            (MultiprocessingOptions, type(None)),
            "multiprocessing_options",
            expected="a MultiprocessingOptions or None",
        )
        super().__init__(ds)
        self._ds = ds
        self._shard_options = shard_options
        self._read_options = read_options
        self._multiprocessing_options = multiprocessing_options

    @functools.cached_property
    def _default_iterator(self) -> _ElasticDatasetIterator:
        return _ElasticDatasetIterator(
            self._ds,
            self._global_batch_size,
            self._shard_options,
            self._read_options,
            self._multiprocessing_options,
        )

    def __iter__(self) -> DatasetIterator:
        return self._default_iterator

    def __next__(self) -> Any:
        return next(self._default_iterator)

    def get_state(self) -> dict[str, Any]:
        """The state of the (single) iterator."""
        return self._default_iterator.get_state()

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Moves the (single) iterator to ``state`` (saved with any shard count)."""
        self._default_iterator.set_state(state)

    def state_for_process_count(
        self, states: list[Any], process_index: int, process_count: int
    ) -> dict[str, Any]:
        """See ``_ElasticDatasetIterator.state_for_process_count`` (used by checkpoint restore)."""
        return self._default_iterator.state_for_process_count(states, process_index, process_count)

    def close(self) -> None:
        """Closes the iterator, if one was started."""
        if "_default_iterator" in self.__dict__:
            self._default_iterator.close()

    def __repr__(self) -> str:
        return (
            f"ElasticIterator(global_batch_size={self._global_batch_size}, "
            f"shard_options={self._shard_options!r})"
        )
