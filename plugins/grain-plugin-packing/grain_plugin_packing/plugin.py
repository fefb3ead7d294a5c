"""Hook implementations registering the packing transformations in ``grain_core.experimental``."""

from grain_core.author import hookimpl
from grain_plugin_packing.concat import BOSHandling, ConcatThenSplitIterDataset
from grain_plugin_packing.packing import BestFitPackIterDataset, FirstFitPackIterDataset


@hookimpl
def register_transforms(register):
    register(FirstFitPackIterDataset)
    register(BestFitPackIterDataset)
    register(ConcatThenSplitIterDataset)
    register(BOSHandling)
