"""Hook implementations registering the window shuffles in ``grain_core.experimental``."""

from grain_core.author import hookimpl
from grain_plugin_window_shuffle.window_shuffle import (
    WindowShuffleIterDataset,
    WindowShuffleMapDataset,
)


@hookimpl
def register_transforms(register):
    register(WindowShuffleMapDataset)
    register(WindowShuffleIterDataset)
