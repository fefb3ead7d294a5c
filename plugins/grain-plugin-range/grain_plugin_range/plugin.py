"""Hook implementations registering the range source and factory."""

from grain_core.author import hookimpl
from grain_plugin_range.source import RangeDataSource, range_dataset


@hookimpl
def register_sources(register):
    register(RangeDataSource)


@hookimpl
def register_dataset_factories(register):
    register(range_dataset, name="range", on="MapDataset")
