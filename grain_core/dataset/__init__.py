"""The dataset kernel: protocols (``base``), core map and iter stages, mixing, reading with threads.

Public helpers for plugins and the runtime:

* :func:`iterator_tree` — every iterator upstream of one, depth first (itself first).
* :class:`PrefetchDatasetIterator` — the ``to_iter_dataset`` iterator; ``set_slice`` makes a worker
  read every ``count``-th index.

Importing this package fills ``base.stages`` with the stage classes that the methods of
``MapDataset`` and ``IterDataset`` build, one typed line each (``base`` never imports the modules that
import it; :mod:`grain_core.dataset.locator`).
"""

from __future__ import annotations

from grain_core.dataset import apply, batch_ops, filter_ops, iter_ops, map_ops, mixing, prefetch
from grain_core.dataset.base import IterDataset, MapDataset, stages
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
# base.Stages; tests/test_layers.py reads these lines).
stages.SourceMapDataset = map_ops.SourceMapDataset
stages.SeedMapDataset = map_ops.SeedMapDataset
stages.ShuffleMapDataset = map_ops.ShuffleMapDataset
stages.SliceMapDataset = map_ops.SliceMapDataset
stages.MapMapDataset = map_ops.MapMapDataset
stages.RandomMapMapDataset = map_ops.RandomMapMapDataset
stages.MapWithIndexMapDataset = map_ops.MapWithIndexMapDataset
stages.FilterMapDataset = map_ops.FilterMapDataset
stages.BatchMapDataset = map_ops.BatchMapDataset
stages.RepeatMapDataset = map_ops.RepeatMapDataset
stages.ConcatenateMapDataset = mixing.ConcatenateMapDataset
stages.MixedMapDataset = mixing.MixedMapDataset
stages.SelectionMapDataset = mixing.SelectionMapDataset
stages.PrefetchIterDataset = prefetch.PrefetchIterDataset
stages.MixedIterDataset = mixing.MixedIterDataset
stages.SeedIterDataset = iter_ops.SeedIterDataset
stages.MapIterDataset = iter_ops.MapIterDataset
stages.RandomMapIterDataset = iter_ops.RandomMapIterDataset
stages.MapWithIndexIterDataset = iter_ops.MapWithIndexIterDataset
stages.FilterIterDataset = filter_ops.FilterIterDataset
stages.BatchIterDataset = batch_ops.BatchIterDataset
stages.apply_transformations = apply.apply_transformations
