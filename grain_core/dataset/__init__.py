"""The dataset kernel: protocols (``base``), core map and iter stages, mixing, reading with threads.

Public helpers for plugins and the runtime:

* :func:`iterator_tree` — every iterator upstream of one, depth first (itself first).
* :class:`PrefetchDatasetIterator` — the ``to_iter_dataset`` iterator; ``set_slice`` makes a worker
  read every ``count``-th index.

Importing this package fills ``base.builders`` with the stage classes that the methods of
``MapDataset`` and ``IterDataset`` build, one typed line each (``base`` never imports the modules that
import it; :mod:`grain_core.dataset.locator`).
"""

from __future__ import annotations

from grain_core.dataset import apply, batch_ops, filter_ops, iter_ops, map_ops, mixing, prefetch
from grain_core.dataset.base import IterDataset, MapDataset, builders
from grain_core.dataset.filter_ratio import FilterRatioError
from grain_core.dataset.iterator import DatasetIterator
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

# Which module builds which stage of the MapDataset / IterDataset methods (typed against
# base.StageBuilders; tests/test_layers.py reads these lines).
builders.SourceMapDataset = map_ops.SourceMapDataset
builders.SeedMapDataset = map_ops.SeedMapDataset
builders.ShuffleMapDataset = map_ops.ShuffleMapDataset
builders.SliceMapDataset = map_ops.SliceMapDataset
builders.MapMapDataset = map_ops.MapMapDataset
builders.RandomMapMapDataset = map_ops.RandomMapMapDataset
builders.MapWithIndexMapDataset = map_ops.MapWithIndexMapDataset
builders.FilterMapDataset = map_ops.FilterMapDataset
builders.BatchMapDataset = map_ops.BatchMapDataset
builders.RepeatMapDataset = map_ops.RepeatMapDataset
builders.ConcatenateMapDataset = mixing.ConcatenateMapDataset
builders.MixedMapDataset = mixing.MixedMapDataset
builders.SelectionMapDataset = mixing.SelectionMapDataset
builders.PrefetchIterDataset = prefetch.PrefetchIterDataset
builders.MixedIterDataset = mixing.MixedIterDataset
builders.SeedIterDataset = iter_ops.SeedIterDataset
builders.MapIterDataset = iter_ops.MapIterDataset
builders.RandomMapIterDataset = iter_ops.RandomMapIterDataset
builders.MapWithIndexIterDataset = iter_ops.MapWithIndexIterDataset
builders.FilterIterDataset = filter_ops.FilterIterDataset
builders.BatchIterDataset = batch_ops.BatchIterDataset
builders.apply_transformations = apply.apply_transformations
