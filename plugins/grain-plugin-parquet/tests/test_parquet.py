"""Tests of ParquetIterDataset and ParquetDataSource, with real Parquet files (pyarrow)."""

from __future__ import annotations

import importlib.util
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from grain_plugin_parquet import ParquetDataSource, ParquetIterDataset

import grain_core as grain
from grain_core import testing

HAS_MP = importlib.util.find_spec("grain_core.runtime.multiprocess") is not None


def _table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "x": ids.astype(np.float32) / 2,
            "text": [f"row {i}" for i in ids],
            "tokens": [list(range(i % 4)) for i in ids],
        }
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[str]:
    d = tmp_path_factory.mktemp("pq")
    paths = []
    for f in range(3):
        p = str(d / f"part-{f}.parquet")
        pq.write_table(_table(100 * f, 23 + f), p, row_group_size=7)
        paths.append(p)
    return paths


def _ids(rows):
    return [int(r["id"]) for r in rows]


def test_registered_names():
    assert grain.experimental.ParquetIterDataset is ParquetIterDataset
    assert grain.sources.ParquetIterDataset is ParquetIterDataset
    assert grain.ParquetDataSource is ParquetDataSource


def test_rows_are_dicts_of_numpy_values_in_file_order(files):
    ds = ParquetIterDataset(files[0])
    assert isinstance(ds, grain.IterDataset)
    it = iter(ds)
    assert isinstance(it, grain.DatasetIterator)
    rows = list(it)
    assert _ids(rows) == list(range(23)) and ds.num_rows == 23
    r = rows[9]
    assert set(r) == {"id", "x", "text", "tokens"}
    assert isinstance(r["id"], np.int64) and isinstance(r["x"], np.float32)
    assert r["x"] == np.float32(4.5) and r["text"] == "row 9"
    np.testing.assert_array_equal(r["tokens"], [0])
    assert isinstance(r["tokens"], np.ndarray)


def test_columns_uri_and_explicit_filesystem(files):
    rows = list(ParquetIterDataset(files[1], columns=["id"]))
    assert list(rows[0]) == ["id"] and _ids(rows) == list(range(100, 124))
    assert _ids(ParquetIterDataset("file://" + files[1])) == list(range(100, 124))
    local = pafs.LocalFileSystem()
    assert _ids(ParquetIterDataset(files[1], filesystem=local)) == list(range(100, 124))
    # read_kwargs go to pyarrow.parquet.ParquetFile
    assert _ids(ParquetIterDataset(files[1], buffer_size=1024)) == list(range(100, 124))


def test_checkpoint_restores_without_rereading_consumed_row_groups(files, monkeypatch):
    ds = ParquetIterDataset(files[2])
    testing.assert_equal_output_after_checkpoint(ds)
    it = iter(ds)
    for _ in range(16):
        next(it)
    state = it.get_state()
    assert state["row_group"] == 2 and state["row"] == 2
    read = []
    original = pq.ParquetFile.read_row_group

    def spy(self, i, *a, **k):
        read.append(i)
        return original(self, i, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    fresh = iter(ds)
    fresh.set_state(state)
    assert _ids(fresh) == list(range(216, 225))
    assert read == [2, 3]
    fresh.close()


def test_state_from_another_file_is_refused(files):
    state = iter(ParquetIterDataset(files[0])).get_state()
    with pytest.raises(grain.state.StateMismatchError):
        iter(ParquetIterDataset(files[1])).set_state(state)


def test_pipeline_over_file_names_and_in_chains(files):
    ds = grain.MapDataset.source(files).map(ParquetIterDataset)
    assert all(isinstance(x, ParquetIterDataset) for x in ds)
    chained = grain.MapDataset.source(files).to_iter_dataset().map(ParquetIterDataset)
    assert [d.num_rows for d in chained] == [23, 24, 25]
    batched = ParquetIterDataset(files[0], columns=["id", "x"]).batch(5)
    first = next(iter(batched))
    np.testing.assert_array_equal(first["id"], np.arange(5))
    testing.assert_equal_output_after_checkpoint(batched)


def test_pickles(files):
    ds = pickle.loads(pickle.dumps(ParquetIterDataset(files[0])))
    assert _ids(ds) == list(range(23))


def test_bad_inputs_name_the_file(files, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        ParquetIterDataset(str(tmp_path / "nope.parquet"))
    other = tmp_path / "text.parquet"
    other.write_text("definitely not parquet\n" * 20)
    with pytest.raises(ValueError, match="text.parquet.*not a readable Parquet file"):
        ParquetIterDataset(str(other))
    data = open(files[0], "rb").read()
    corrupt = tmp_path / "corrupt.parquet"  # magic bytes intact, footer metadata garbage
    corrupt.write_bytes(data[:-12] + b"\x01" * 8 + data[-4:])
    with pytest.raises(ValueError, match="corrupt.parquet"):
        ParquetIterDataset(str(corrupt))
    with pytest.raises(ValueError, match=r"\['nope'\].*part-0.parquet"):
        ParquetIterDataset(files[0], columns=["id", "nope"])
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        ParquetDataSource([files[0], str(tmp_path / "nope.parquet")])
    with pytest.raises(ValueError, match="nope"):
        ParquetDataSource(files, columns=["nope"])
    with pytest.raises(ValueError, match="corrupt.parquet"):
        ParquetDataSource(str(corrupt))


# --- ParquetDataSource ---------------------------------------------------------------------------


def test_data_source_random_access(files):
    src = ParquetDataSource(files)
    assert len(src) == 23 + 24 + 25
    everything = [r for f in files for r in ParquetIterDataset(f)]
    assert _ids(src[i] for i in range(len(src))) == _ids(everything)
    idx = [71, 0, 30, 30, 5, -1, 47]
    assert _ids(src.__getitems__(idx)) == [_ids(everything)[i] for i in idx]
    assert src[-1]["text"] == "row 224"
    with pytest.raises(IndexError, match="length 72"):
        src[72]
    with pytest.raises(IndexError, match="length 72"):
        src.__getitems__([1, 99])


def test_data_source_glob_columns_and_cache_bound(files):
    pattern = files[0].replace("part-0", "part-*")
    src = ParquetDataSource(pattern, columns=["id"], cache_bytes=1)
    assert src.paths == files and src.column_names == ["id"]
    assert _ids(src.__getitems__(list(range(0, 72, 3)))) == _ids(
        [{"id": i} for f in range(3) for i in range(100 * f, 100 * f + 23 + f)][0:72:3]
    )
    assert len(src._cache) == 1  # bounded: only the row group just read stays


def test_data_source_conformance_and_pickle(files):
    src = ParquetDataSource(files)
    src[3]
    clone = pickle.loads(pickle.dumps(src))
    assert repr(clone) == repr(src) and "len=72" in repr(src)
    testing.check_source(src, mp_workers=2 if HAS_MP else 0)
    with ParquetDataSource(files) as s:
        s[0]
    assert not s._cache


def test_data_source_pipeline_checkpoints(files):
    src = ParquetDataSource(files, columns=["id", "x", "text"])
    ds = grain.MapDataset.source(src).seed(1).shuffle().batch(8)
    testing.assert_equal_output_after_checkpoint(ds)
