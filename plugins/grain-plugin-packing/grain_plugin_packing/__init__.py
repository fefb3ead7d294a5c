"""grain_core plugin providing sequence packing: ``FirstFitPackIterDataset``,
``BestFitPackIterDataset`` and ``ConcatThenSplitIterDataset``."""

from grain_plugin_packing.concat import BOSHandling, ConcatThenSplitIterDataset
from grain_plugin_packing.packing import BestFitPackIterDataset, FirstFitPackIterDataset

__all__ = [
    "BOSHandling",
    "BestFitPackIterDataset",
    "ConcatThenSplitIterDataset",
    "FirstFitPackIterDataset",
]
