"""grain_core plugin providing ``WindowShuffleMapDataset`` and ``WindowShuffleIterDataset``."""

from grain_plugin_window_shuffle.window_shuffle import (
    WindowShuffleIterDataset,
    WindowShuffleMapDataset,
)

__all__ = ["WindowShuffleIterDataset", "WindowShuffleMapDataset"]
