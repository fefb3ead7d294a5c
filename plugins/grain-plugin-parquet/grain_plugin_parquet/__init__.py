"""grain_core plugin providing ``ParquetIterDataset`` and ``ParquetDataSource``."""

from grain_plugin_parquet.dataset import ParquetIterDataset
from grain_plugin_parquet.source import ParquetDataSource

__all__ = ["ParquetDataSource", "ParquetIterDataset"]
