"""The dataset kernel: protocols (``base``), core map and iter stages, mixing, reading with threads.

Public helpers for plugins and the runtime:

* :func:`iterator_tree` — every iterator upstream of one, depth first (itself first).
* :class:`PrefetchDatasetIterator` — the ``to_iter_dataset`` iterator; ``set_slice`` makes a worker
  read every ``count``-th index.

Importing this package installs the stage classes into ``locator.installed``, which the methods of
``MapDataset`` and ``IterDataset`` build (``base`` never imports the modules that import it).
"""

from __future__ import annotations

from grain_core.dataset import apply, batch_ops, describe, filter_ops, iter_ops, map_ops, mixing
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.filter_ratio import FilterRatioError
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.locator import installed
from grain_core.dataset.prefetch import PrefetchDatasetIterator, PrefetchIterDataset
from grain_core.dataset.trees import dataset_tree, iterator_tree

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

installed.install(
    describe=describe.describe,
    apply_transformations=apply.apply_transformations,
    PrefetchIterDataset=PrefetchIterDataset,
    **{
        name: getattr(module, name)
        for module, names in [
            (
                map_ops,
                (
                    "SourceMapDataset",
                    "SeedMapDataset",
                    "ShuffleMapDataset",
                    "SliceMapDataset",
                    "MapMapDataset",
                    "RandomMapMapDataset",
                    "MapWithIndexMapDataset",
                    "FilterMapDataset",
                    "BatchMapDataset",
                    "RepeatMapDataset",
                ),
            ),
            (
                iter_ops,
                (
                    "SeedIterDataset",
                    "MapIterDataset",
                    "RandomMapIterDataset",
                    "MapWithIndexIterDataset",
                ),
            ),
            (filter_ops, ("FilterIterDataset",)),
            (batch_ops, ("BatchIterDataset",)),
            (
                mixing,
                ("ConcatenateMapDataset", "MixedMapDataset", "SelectionMapDataset", "MixedIterDataset"),
            ),
        ]
        for name in names
    },
)
