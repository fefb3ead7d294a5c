"""Hook implementations registering the Parquet dataset and source."""

from grain_core.author import hookimpl
from grain_plugin_parquet.dataset import ParquetIterDataset
from grain_plugin_parquet.source import ParquetDataSource


@hookimpl
def register_sources(register):
    register(ParquetIterDataset, experimental=True)
    register(ParquetDataSource)
