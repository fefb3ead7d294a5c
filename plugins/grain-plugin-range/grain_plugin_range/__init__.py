"""grain_core plugin providing ``RangeDataSource`` and ``MapDataset.range``."""

from grain_plugin_range.source import RangeDataSource, range_dataset

__all__ = ["RangeDataSource", "range_dataset"]
