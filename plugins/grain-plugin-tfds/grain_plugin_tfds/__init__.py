"""grain_core plugin providing ``TfdsDataSource``."""

from grain_plugin_tfds.source import TfdsDataSource

__all__ = ["TfdsDataSource"]
