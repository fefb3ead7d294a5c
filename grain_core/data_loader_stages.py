"""The ``DataLoader``'s pipeline stages: the sampler's positions over the data source
(``_SamplerSourceMapDataset``), the records Grain's operations see (``_RecordsMapDataset``) and the
operations applied per record (``_OperationsMapDataset``), with the sampler helpers they share."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grain_core import global_config as _config
from grain_core import transforms as tr
from grain_core.dataset.base import MapDataset
from grain_core.dataset.map_ops import source_identity
from grain_core.operations import as_transform, is_custom_operation
from grain_core.records import Record
from grain_core.sharding import ShardOptions, stream_positions

_MAP, _RANDOM, _INDEX, _FILTER = range(4)


def _sampler_len(sampler: Any) -> int:
    """The sampler's length; for a sampler without ``__len__`` (Grain's ``Sampler`` protocol,
    which ends an epoch by raising ``IndexError``), see :func:`_sampler_end`."""
    try:
        return len(sampler)
    except TypeError:
        return _sampler_end(sampler)


def _sampler_end(sampler: Any) -> int:
    """The first index at which ``sampler[index]`` raises ``IndexError`` (``sys.maxsize`` if none
    does below it): where Grain's DataLoader ends the epoch. A sampler is deterministic random
    access, so the end is found by doubling then bisecting, in about ``2 * log2(end)`` calls."""

    def has(index: int) -> bool:
        try:
            sampler[index]
        except IndexError:
            return False
        return True

    if not has(0):
        return 0
    known, step = 0, 1
    while True:
        probe = known + step
        if probe >= sys.maxsize:
            return sys.maxsize
        if not has(probe):
            break
        known, step = probe, step * 2
    while probe - known > 1:
        middle = (known + probe) // 2
        if has(middle):
            known = middle
        else:
            probe = middle
    return probe


def _sampler_index(positions: np.ndarray, shard_options: ShardOptions) -> np.ndarray:
    """The sampler's (global) indices of this shard's stream positions."""
    return positions * shard_options.shard_count + shard_options.shard_index


class _SamplerSourceMapDataset(MapDataset):
    """Position ``i`` of this shard's stream → the data source's record at
    ``sampler[i * shard_count + shard_index]`` (Grain's ``_SamplerMapDataset``)."""

    def __init__(self, sampler: Any, source: Any, shard_options: ShardOptions):
        super().__init__()
        self._sampler = sampler
        self._source = source
        self._shards = shard_options
        # Every position of this shard (Grain's total // shard_count under grain_exact).
        exact = getattr(sampler, "_grain_exact", None)
        exact = _config.grain_exact() if exact is None else exact
        self._len = stream_positions(
            _sampler_len(sampler),
            shard_options.shard_index,
            shard_options.shard_count,
            exact,
            shard_options.drop_remainder,
        )
        self._bulk = getattr(source, "__getitems__", None)
        self._keys = getattr(sampler, "record_keys", None)
        # As MapDataset.source: keys as one int64 array for a source declaring it reads them so.
        self._bulk_arrays = (
            self._bulk is not None
            and self._keys is not None
            and bool(getattr(source, "getitems_takes_arrays", False))
        )

    def __len__(self) -> int:
        return self._len

    def fingerprint_fields(self) -> dict[str, Any]:
        return {"sampler": repr(self._sampler), "source": source_identity(self._source)}

    def _record_keys(self, positions: np.ndarray) -> list[int]:
        positions = _sampler_index(positions, self._shards)
        if self._keys is not None:
            return self._keys(positions).tolist()
        return [int(self._sampler[i].record_key) for i in positions.tolist()]

    def element_at(self, index: int):
        if self._len == 0:
            raise IndexError("The sampler has no positions.")
        return self._source[self._record_keys(np.asarray([index % self._len]))[0]]

    def __getitems__(self, indices):
        if len(indices) == 0:
            return []
        if self._len == 0:
            raise IndexError("The sampler has no positions.")
        positions = np.asarray(indices, dtype=np.int64) % self._len
        if self._bulk_arrays:
            keys = self._keys(_sampler_index(positions, self._shards))
            return list(self._bulk(np.asarray(keys, dtype=np.int64)))
        keys = self._record_keys(positions)
        if self._bulk is not None:
            return list(self._bulk(keys))
        src = self._source
        return [src[k] for k in keys]

    def __str__(self) -> str:
        return f"DataLoaderSource({source_identity(self._source)}, {self._sampler!r})"


def _record_data(record: Record) -> Any:
    return record.data


class _RecordsMapDataset(MapDataset):
    """Position ``i`` → ``Record(sampler metadata, element i of parent)``: the records a custom
    legacy ``Operation`` reads (``index`` is the sampler's global index)."""

    def __init__(self, parent: _SamplerSourceMapDataset, sampler: Any, shard_options: ShardOptions):
        super().__init__(parent)
        self._parent = parent
        self._sampler = sampler
        self._shards = shard_options

    def __len__(self) -> int:
        return len(self._parent)

    def element_at(self, index: int):
        return self.__getitems__([index])[0]

    def __getitems__(self, indices):
        items = self._parent.__getitems__(indices)
        n = max(len(self._parent), 1)
        glob = _sampler_index(np.asarray(indices, dtype=np.int64) % n, self._shards).tolist()
        return [Record(self._sampler[g], x) for g, x in zip(glob, items)]

    def __str__(self) -> str:
        return "DataLoaderRecords"


class _OperationsMapDataset(MapDataset):
    """Applies 1:1 operations in order; ``RandomMap`` gets the sampler's per-record ``rng`` (one
    generator shared by all RandomMaps of a record, as in Grain), ``MapWithIndex`` the position.
    A failed ``Filter`` gives ``None``."""

    def __init__(
        self, parent: MapDataset, ops: Sequence[Any], sampler: Any, shard_options: ShardOptions
    ):
        super().__init__(parent)
        self._parent = parent
        self._sampler = sampler
        self._shards = shard_options
        self._names = tuple(type(op).__name__ for op in ops)
        steps: list[tuple[int, Callable[..., Any]]] = []
        for op in ops:  # the ops before the first FlatMap / Batch
            kind = tr.kind_of(op)
            if kind is tr.Map:
                step = _MAP
            elif kind is tr.RandomMap:
                step = _RANDOM
            elif kind is tr.MapWithIndex:
                step = _INDEX
            else:
                kind, step = tr.Filter, _FILTER
            steps.append((step, getattr(op, tr.method_name(kind))))
        self._steps = tuple(steps)
        self._maps_only = all(kind == _MAP for kind, _ in steps)
        self._rng = getattr(sampler, "rng", None)

    def __len__(self) -> int:
        return len(self._parent)

    def fingerprint_fields(self) -> dict[str, Any]:
        # One field per operation, so the digest is that of the names in order.
        return {f"operation{i}": name for i, name in enumerate(self._names)}

    def _record_rng(self, index: int):
        index = index * self._shards.shard_count + self._shards.shard_index
        if self._rng is not None:
            return self._rng(index)
        return self._sampler[index].rng

    def _apply(self, index: int, x: Any) -> Any:
        rng = None
        for kind, fn in self._steps:
            if kind == _MAP:
                x = fn(x)
            elif kind == _RANDOM:
                if rng is None:
                    rng = self._record_rng(index)
                x = fn(x, rng)
            elif kind == _INDEX:
                x = fn(index, x)
            elif not fn(x):
                return None
        return x

    def element_at(self, index: int):
        x = self._parent.element_at(index)
        return None if x is None else self._apply(index, x)

    def __getitems__(self, indices):
        items = self._parent.__getitems__(indices)
        if self._maps_only:
            for _, fn in self._steps:
                items = [fn(x) for x in items]
            return items
        apply = self._apply
        return [apply(int(i), x) for i, x in zip(indices, items)]

    def __str__(self) -> str:
        return f"DataLoaderOperations({', '.join(self._names)})"


def _check_operations(operations: Any) -> list[Any]:
    if isinstance(operations, (str, bytes)) or not isinstance(operations, Sequence):
        try:
            operations = list(operations)
        except TypeError:
            raise TypeError(
                "DataLoader operations must be a sequence of grain_core.transforms objects, got "
                f"{type(operations).__name__}."
            ) from None
    operations = list(operations)
    for i, op in enumerate(operations):
        if not tr.is_transform(op) and not callable(op):
            raise TypeError(
                f"DataLoader operations[{i}] is a {type(op).__name__}; expected a "
                "grain_core.transforms Map, RandomMap, MapWithIndex, Filter, FlatMap or Batch "
                "object, or a legacy Operation (a callable over an iterator of Records). Wrap "
                "plain functions in a Map subclass."
            )
    if any(is_custom_operation(as_transform(op)) for op in operations):
        # A user's Operation: every operation runs over records, as in Grain (_build_records).
        return operations
    # Grain's legacy MapOperation / RandomMapOperation / FilterOperation / BatchOperation.
    return [as_transform(op) for op in operations]
