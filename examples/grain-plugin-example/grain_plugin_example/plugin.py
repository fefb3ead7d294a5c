"""The hooks: what grain-plugin-example adds to grain_core."""

from grain_core.author import hookimpl
from grain_plugin_example.jsonl import JsonlDataSource
from grain_plugin_example.select import SelectFieldsMapDataset


@hookimpl
def register_sources(register):
    register(JsonlDataSource)


@hookimpl
def register_transforms(register):
    register(SelectFieldsMapDataset)
