"""grain-plugin-example's tests. Run them with the plugin installed (``nox -s example-plugin``):
the first test proves a plain ``import grain_core`` discovers it through its entry point."""

from __future__ import annotations

import pickle

import pytest
from grain_plugin_example import JsonlDataSource, SelectFieldsMapDataset, write_jsonl

import grain_core as grain
from grain_core import testing


@pytest.fixture
def files(tmp_path):
    paths = []
    for f in range(3):
        path = tmp_path / f"part-{f}.jsonl"
        write_jsonl(path, ({"id": f * 100 + i, "text": f"row {i}", "tags": [i, f]} for i in range(40 + f)))
        paths.append(path)
    return paths


def test_discovered_by_plain_import():
    infos = [p for p in grain.plugins.list_plugins() if p.distribution == "grain-plugin-example"]
    assert infos and infos[0].status == "loaded", grain.plugins.list_plugins()
    assert infos[0].entry_point == "grain_plugin_example.plugin"
    assert grain.sources.JsonlDataSource is JsonlDataSource
    assert grain.JsonlDataSource is JsonlDataSource
    assert grain.experimental.SelectFieldsMapDataset is SelectFieldsMapDataset


def test_source_conforms(files):
    src = JsonlDataSource(files)
    assert len(src) == 40 + 41 + 42
    assert src[40] == {"id": 100, "text": "row 0", "tags": [0, 1]}
    assert src[-1]["id"] == 241
    testing.check_source(src)


def test_source_in_worker_processes(files):
    testing.check_source(JsonlDataSource(files), sample=16, mp_workers=2)


def test_pickles_without_open_files(files):
    src = JsonlDataSource(files)
    src[0]
    again = pickle.loads(pickle.dumps(src))
    assert again[5] == src[5]


def test_select_fields_in_a_pipeline(files):
    ds = (
        grain.MapDataset.source(grain.sources.JsonlDataSource(files))
        .seed(7)
        .shuffle()
        .pipe(grain.experimental.SelectFieldsMapDataset, ["id"])
    )
    ids = sorted(x["id"] for x in ds.to_iter_dataset())
    assert ids == sorted([f * 100 + i for f in range(3) for i in range(40 + f)])
    testing.assert_equal_output_after_checkpoint(ds.batch(5).to_iter_dataset())
    testing.check_deterministic(lambda: grain.MapDataset.source(JsonlDataSource(files)).seed(1).shuffle())


def test_select_missing_field_names_it(files):
    ds = SelectFieldsMapDataset(grain.MapDataset.source(JsonlDataSource(files)), ["nope"])
    with pytest.raises(KeyError, match="nope"):
        ds[0]
