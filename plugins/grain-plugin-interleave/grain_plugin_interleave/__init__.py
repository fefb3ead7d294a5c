"""grain_core plugin providing ``InterleaveIterDataset``."""

from grain_plugin_interleave.interleave import InterleaveIterDataset

__all__ = ["InterleaveIterDataset"]
