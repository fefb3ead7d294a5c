"""The conformance kit's stage checks for the example plugin's stage and source."""

import functools

from grain_plugin_example import JsonlDataSource, SelectFieldsMapDataset, write_jsonl

import grain_core as grain
from grain_core import testing


def make(paths, fields=("id",)):
    src = grain.MapDataset.source(JsonlDataSource(paths))
    return SelectFieldsMapDataset(src, fields).shuffle(seed=1)


def test_select_fields_and_jsonl_source_conform(tmp_path):
    paths = []
    for f in range(2):
        path = tmp_path / f"part-{f}.jsonl"
        write_jsonl(path, ({"id": f * 100 + i, "text": f"row {i}"} for i in range(20 + f)))
        paths.append(path)
    testing.check_stage(
        functools.partial(make, paths), foreign=functools.partial(make, paths, ("id", "text"))
    )
