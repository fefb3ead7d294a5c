"""Hook implementations registering ``InterleaveIterDataset`` in ``grain_core.experimental``."""

from grain_core.author import hookimpl
from grain_plugin_interleave.interleave import InterleaveIterDataset


@hookimpl
def register_transforms(register):
    register(InterleaveIterDataset)
