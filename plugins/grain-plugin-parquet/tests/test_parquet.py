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


# --- hardening -------------------------------------------------------------------------------------


def _open_fds(name_part: str) -> int:
    n = testing.open_file_count(name_part)
    if n is None:
        pytest.skip("needs /proc/self/fd")
    return n



def test_subtree_and_fsspec_memory_filesystems(files):
    import os

    sub = pafs.SubTreeFileSystem(os.path.dirname(files[1]), pafs.LocalFileSystem())
    ds = ParquetIterDataset(os.path.basename(files[1]), filesystem=sub)
    assert _ids(ds) == list(range(100, 124))
    assert "subtree:" in repr(ds)  # a relative path inside a subtree is not the same data
    clone = pickle.loads(pickle.dumps(ds))
    assert _ids(clone) == list(range(100, 124)) and repr(clone) == repr(ds)
    src = ParquetDataSource([os.path.basename(f) for f in files], filesystem=sub)
    assert len(src) == 72 and int(src[30]["id"]) == 107

    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    with open(files[0], "rb") as fh:
        mem.pipe("/grain-test/part-0.parquet", fh.read())
    try:
        assert _ids(ParquetIterDataset("/grain-test/part-0.parquet", filesystem=mem)) == list(
            range(23)
        )
        wrapped = pafs.PyFileSystem(pafs.FSSpecHandler(mem))
        msrc = ParquetDataSource("/grain-test/part-0.parquet", filesystem=wrapped)
        assert _ids(msrc.__getitems__([22, 0])) == [22, 0]
        with pytest.raises(FileNotFoundError, match="missing.parquet"):
            ParquetIterDataset("/grain-test/missing.parquet", filesystem=mem)
    finally:
        mem.rm("/grain-test", recursive=True)


def test_arguments_of_the_wrong_type(files):
    with pytest.raises(TypeError, match="path must be a str or os.PathLike, got int"):
        ParquetIterDataset(5)
    with pytest.raises(TypeError, match="got bytes"):
        ParquetIterDataset(files[0].encode())
    with pytest.raises(TypeError, match="filesystem must be"):
        ParquetIterDataset(files[0], filesystem="local")
    with pytest.raises(TypeError, match="bad read option for .*part-0.parquet"):
        ParquetIterDataset(files[0], no_such_option=1)
    with pytest.raises(TypeError, match="not a string"):
        ParquetIterDataset(files[0], columns="id")
    with pytest.raises(TypeError, match="column names must be strings"):
        ParquetIterDataset(files[0], columns=[0])
    with pytest.raises(TypeError, match="got int"):
        ParquetDataSource(5)
    with pytest.raises(ValueError, match="at least one path"):
        ParquetDataSource([])
    with pytest.raises(ValueError, match="cache_bytes must be non-negative, got -1"):
        ParquetDataSource(files, cache_bytes=-1)
    with pytest.raises(TypeError, match="cache_bytes must be an int"):
        ParquetDataSource(files, cache_bytes="1G")
    src = ParquetDataSource(files)
    with pytest.raises(TypeError, match="integers"):
        src.__getitems__([1.5])  # must not be truncated to row 1
    with pytest.raises(TypeError, match="1-D"):
        src.__getitems__([[1, 2]])
    with pytest.raises(IndexError, match="length 72"):
        src.__getitems__([2**70])
    with pytest.raises(IndexError, match="length 72"):
        src[-73]


def test_files_are_closed_after_iteration_close_and_gc(files, tmp_path):
    import gc

    before = _open_fds(".parquet")
    it = iter(ParquetIterDataset(files[0]))
    next(it)
    assert _open_fds(".parquet") == before + 1
    list(it)  # exhausted: the file is released without waiting for close()
    assert _open_fds(".parquet") == before
    it = iter(ParquetIterDataset(files[0]))
    next(it)
    it.close()
    assert _open_fds(".parquet") == before
    assert int(next(it)["id"]) == 1  # a closed iterator reopens where it was
    it.close()
    with pytest.raises(TypeError):
        ParquetIterDataset(files[0], no_such_option=1)
    assert _open_fds(".parquet") == before  # a failed open does not leak its handle
    src = ParquetDataSource(files)
    src.__getitems__([0, 30, 60])
    assert _open_fds(".parquet") == before + 3
    src.close()
    assert _open_fds(".parquet") == before
    src[0]
    del src
    gc.collect()
    assert _open_fds(".parquet") == before


def test_bad_states_are_refused(files):
    ds = ParquetIterDataset(files[0])  # row groups of 7, 7, 7, 2
    it = iter(ds)
    state = it.get_state()
    for rg, row in ((1, 8), (5, 0), (4, 1)):
        with pytest.raises(grain.state.StateMismatchError, match="row group"):
            it.set_state({**state, "row_group": rg, "row": row})
    with pytest.raises(TypeError, match="row must be an int"):
        it.set_state({**state, "row_group": 0, "row": "3"})
    with pytest.raises(ValueError, match="row_group must be >= 0"):
        it.set_state({**state, "row_group": -1, "row": 0})
    it.set_state({**state, "row_group": 3, "row": 2})  # the end
    assert list(it) == []
    it.set_state({**state, "row_group": 1, "row": 7})  # end of a row group: next one follows
    assert int(next(it)["id"]) == 14


def test_bulk_reads_decode_each_row_group_once(files, monkeypatch):
    decoded = []
    original = pq.ParquetFile.read_row_group

    def spy(self, i, *a, **k):
        decoded.append(i)
        return original(self, i, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    src = ParquetDataSource(files[0], cache_bytes=0)  # no reuse across calls
    idx = [22, 0, 6, 1, 21, 7, 0]  # row groups 3, 0, 0, 0, 3, 1, 0
    assert _ids(src.__getitems__(idx)) == idx
    assert sorted(decoded) == [0, 1, 3]


def test_data_source_thread_safe(files):
    from concurrent.futures import ThreadPoolExecutor

    src = ParquetDataSource(files, cache_bytes=2_000)  # small: threads keep evicting and decoding
    want = _ids(src[i] for i in range(len(src)))
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(src), size=20).tolist() for _ in range(100)]
    with ThreadPoolExecutor(8) as pool:
        futs = [pool.submit(src.__getitems__, b) for b in batches]
        singles = list(pool.map(src.__getitem__, range(len(src))))
        src.close()
        for b, f in zip(batches, futs):
            assert _ids(f.result()) == [want[i] for i in b]
    assert _ids(singles) == want


def test_repr_is_the_same_in_another_process(files):
    import subprocess
    import sys

    src = ParquetDataSource(files, columns=["id", "text"])
    ds = ParquetIterDataset(files[0], columns=["id"])
    code = (
        "import grain_core as g; "
        f"print(repr(g.ParquetDataSource({files!r}, columns=['id', 'text']))); "
        f"print(repr(g.experimental.ParquetIterDataset({files[0]!r}, columns=['id'])))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [repr(src), repr(ds)]
    assert repr(src) != repr(ParquetDataSource(files, columns=["id"]))


def test_cli_lists_the_plugin_with_its_version():
    testing.check_plugin_listed(
        "parquet", "grain-plugin-parquet", ["ParquetIterDataset", "ParquetDataSource"]
    )
