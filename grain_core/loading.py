"""``grain_core.load``: an ``IndexSampler`` and a ``DataLoader`` in one call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grain_core import transforms as tr
from grain_core.data_loader import DataLoader
from grain_core.options import ReadOptions
from grain_core.samplers import IndexSampler
from grain_core.sharding import NoSharding, ShardOptions

__all__ = ["load"]


def load(
    source: Any,
    *,
    num_epochs: int | None = None,
    shuffle: bool = False,
    seed: int | None = None,
    shard_options: ShardOptions | None = None,
    transformations: Sequence[Any] = (),
    batch_size: int | None = None,
    drop_remainder: bool = False,
    worker_count: int | None = 0,
    read_options: ReadOptions | None = None,
    worker_buffer_size: int = 1,
    enable_profiling: bool = False,
    runtime: Any = None,
) -> DataLoader:
    """Returns a ``DataLoader`` over ``source``.

    The sampler is ``IndexSampler(len(source), shard_options, shuffle, num_epochs, seed)``;
    ``transformations`` are applied in order, then ``Batch(batch_size, drop_remainder)`` when
    ``batch_size`` is given. ``num_epochs=None`` repeats forever. ``runtime`` is where the
    ``worker_count`` workers run, as ``DataLoader(runtime=)`` (a runtime object or registered name).
    """
    if batch_size is not None:
        tr.check_batch_size(batch_size)
    sampler = IndexSampler(
        num_records=len(source),
        shard_options=shard_options if shard_options is not None else NoSharding(),
        shuffle=shuffle,
        num_epochs=num_epochs,
        seed=seed,
    )
    operations = list(transformations)
    if batch_size is not None:
        operations.append(tr.Batch(batch_size=batch_size, drop_remainder=drop_remainder))
    return DataLoader(
        data_source=source,
        sampler=sampler,
        operations=operations,
        worker_count=worker_count,
        worker_buffer_size=worker_buffer_size,
        read_options=read_options,
        enable_profiling=enable_profiling,
        runtime=runtime,
    )
