"""grain-plugin-example: JSON Lines source and a field-selection transform for grain_core."""

from grain_plugin_example.jsonl import JsonlDataSource, write_jsonl
from grain_plugin_example.select import SelectFieldsMapDataset

__all__ = ["JsonlDataSource", "SelectFieldsMapDataset", "write_jsonl"]
