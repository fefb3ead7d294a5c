"""The dataset kernel: protocols (``base``), core map and iter stages, mixing, reading with threads.

Public helpers for plugins and the runtime:

* :func:`iterator_tree` — every iterator upstream of one, depth first (itself first).
* :class:`PrefetchDatasetIterator` — the ``to_iter_dataset`` iterator; ``set_slice`` makes a worker
  read every ``count``-th index.
"""

from __future__ import annotations

from collections.abc import Iterator

from grain_core.dataset.base import DatasetIterator, IterDataset, MapDataset
from grain_core.dataset.prefetch import (
    FilterRatioError,
    PrefetchDatasetIterator,
    PrefetchIterDataset,
)

__all__ = [
    "DatasetIterator",
    "FilterRatioError",
    "IterDataset",
    "MapDataset",
    "PrefetchDatasetIterator",
    "PrefetchIterDataset",
    "dataset_tree",
    "iterator_tree",
]


def iterator_tree(it: DatasetIterator) -> Iterator[DatasetIterator]:
    """Yields ``it`` and every iterator upstream of it, depth first."""
    yield it
    for p in getattr(it, "_parents", ()):
        yield from iterator_tree(p)


def dataset_tree(ds: MapDataset | IterDataset) -> Iterator[MapDataset | IterDataset]:
    """Yields ``ds`` and every dataset upstream of it, depth first."""
    yield ds
    for p in ds.parents:
        yield from dataset_tree(p)
