"""HuggingFaceDataSource against real ``datasets`` objects built locally (no hub, no download)."""

from __future__ import annotations

import json
import pickle

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from grain_plugin_hf import HuggingFaceDataSource
from hf_testdata import table_dict

import grain_core as grain
from grain_core import checkpoint as gc
from grain_core import testing
from grain_core.checkpoint.files import restore_across_process_counts

pytestmark = pytest.mark.timeout(300)
N = 40


def _same_row(a, b):
    assert set(a) == set(b)
    for k in a:
        assert type(a[k]) is type(b[k]), (k, type(a[k]), type(b[k]))
        assert getattr(a[k], "dtype", None) == getattr(b[k], "dtype", None), k
        assert getattr(a[k], "shape", None) == getattr(b[k], "shape", None), k
        if getattr(a[k], "dtype", None) == np.dtype(object):
            for x, y in zip(a[k], b[k]):
                np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(a[k], b[k])


def _check_rows(src, reference, keys):
    rows = src.__getitems__(keys)
    assert len(rows) == len(keys)
    for k, row in zip(keys, rows):
        _same_row(row, reference[int(k)])
        _same_row(src[int(k)], reference[int(k)])


@pytest.fixture(scope="module")
def ds():
    return datasets.Dataset.from_dict(table_dict(N))


def test_registered_names():
    assert grain.sources.HuggingFaceDataSource is HuggingFaceDataSource


def test_rows_are_the_numpy_format_rows(ds):
    src = HuggingFaceDataSource(ds)
    assert len(src) == N and src.column_names == ["text", "tokens", "vec", "label"]
    _check_rows(src, ds.with_format("numpy"), [3, 0, 39, 3, 17])
    row = src[4]
    assert isinstance(row["text"], np.str_) and row["text"] == "row 4"
    assert row["tokens"].dtype == np.int64 and list(row["tokens"]) == [0, 1, 2, 3]
    assert row["vec"].dtype == np.float32 and row["vec"].shape == (3,)
    assert isinstance(row["label"], np.int64)
    row["tokens"][0] = 7  # rows are writable arrays
    assert src[-1]["label"] == N - 1


def test_indices_mapping_of_select_shuffle_filter_is_respected(ds):
    view = ds.shuffle(seed=3).select(range(5, 30)).filter(lambda r: r["label"] % 3 != 0)
    assert view._indices is not None  # a real indices mapping, not a copy
    src = HuggingFaceDataSource(view)
    assert len(src) == len(view)
    _check_rows(src, view.with_format("numpy"), list(range(len(view)))[::-1])


def test_nested_arrays_and_ragged_columns(tmp_path):
    d = datasets.Dataset.from_dict(
        {
            "img": [np.full((2, 3), i, np.float64).tolist() for i in range(6)],
            "ragged": [[[1] * (i % 2 + 1), [2]] for i in range(6)],
            "x": [1.5 * i for i in range(6)],
            "flag": [bool(i % 2) for i in range(6)],
        }
    )
    src = HuggingFaceDataSource(d)
    # ragged inner lists are formatted by datasets itself, row by row
    _check_rows(src, d.with_format("numpy"), [5, 0, 2])
    src2 = HuggingFaceDataSource(d.select_columns(["img", "x", "flag"]))
    assert src2._fast
    _check_rows(src2, d.select_columns(["img", "x", "flag"]).with_format("numpy"), [5, 0, 2])
    assert src2[1]["img"].shape == (2, 3) and src2[1]["x"].dtype == np.float64


def test_with_format_is_respected(ds):
    cols = HuggingFaceDataSource(ds.with_format(columns=["label", "text"]))
    assert cols.column_names == ["label", "text"] and set(cols[2]) == {"label", "text"}
    py = HuggingFaceDataSource(ds.with_format("python"))  # "python" is datasets' default format
    assert py.__getitems__([1])[0]["text"] in ("row 1", np.str_("row 1"))
    arrow = HuggingFaceDataSource(ds.with_format("arrow"))
    t = arrow.__getitems__([2, 1])[0]
    assert isinstance(t, pa.Table) and t.column("label").to_pylist() == [2]
    custom = ds.with_transform(lambda batch: {"double": [2 * x for x in batch["label"]]})
    assert HuggingFaceDataSource(custom).__getitems__([5])[0] == {"double": 10}
    numpy_fmt = HuggingFaceDataSource(ds.with_format("numpy"))
    assert numpy_fmt._fast
    _check_rows(numpy_fmt, ds.with_format("numpy"), [1, 2])


def test_bad_input_is_refused_clearly(ds):
    with pytest.raises(TypeError, match="HuggingFaceIterDataset"):
        HuggingFaceDataSource(ds.to_iterable_dataset())
    with pytest.raises(TypeError, match=r"dataset\['train'\]"):
        HuggingFaceDataSource(datasets.DatasetDict({"train": ds}))
    with pytest.raises(TypeError, match="datasets.Dataset"):
        HuggingFaceDataSource([1, 2, 3])
    src = HuggingFaceDataSource(ds)
    with pytest.raises(IndexError, match="length 40"):
        src[N]
    with pytest.raises(IndexError):
        src.__getitems__([0, N])


def _local_files(tmp_path):
    d = table_dict(N)
    pq.write_table(pa.table(d), tmp_path / "data.parquet", row_group_size=7)
    with open(tmp_path / "data.jsonl", "w") as f:
        for i in range(N):
            f.write(json.dumps({k: v[i] for k, v in d.items()}) + "\n")
    with open(tmp_path / "data.csv", "w") as f:
        f.write("text,label\n" + "".join(f"row {i},{i}\n" for i in range(N)))
    return tmp_path


@pytest.mark.parametrize("builder", ["parquet", "json", "csv", "arrow", "disk"])
def test_local_files_through_load_dataset(tmp_path, hf_cache, builder):
    _local_files(tmp_path)
    if builder == "disk":
        datasets.Dataset.from_dict(table_dict(N)).save_to_disk(str(tmp_path / "saved"))
        d = datasets.load_from_disk(str(tmp_path / "saved"))
    elif builder == "arrow":
        datasets.Dataset.from_dict(table_dict(N)).save_to_disk(str(tmp_path / "saved"))
        files = sorted(str(p) for p in (tmp_path / "saved").glob("*.arrow"))
        d = datasets.load_dataset("arrow", data_files=files, split="train", cache_dir=hf_cache)
    else:
        ext = {"parquet": "parquet", "json": "jsonl", "csv": "csv"}[builder]
        d = datasets.load_dataset(
            builder, data_files=str(tmp_path / f"data.{ext}"), split="train", cache_dir=hf_cache
        )
    d = d.shuffle(seed=1)
    src = HuggingFaceDataSource(d)
    _check_rows(src, d.with_format("numpy"), [0, 7, 39, 12])
    # A file-backed dataset pickles by its files (cheap to send to workers).
    if builder != "csv":
        assert len(pickle.dumps(src)) < 200_000
    testing.check_source(src, sample=16)


def test_conforms_with_worker_processes(ds):
    testing.check_source(HuggingFaceDataSource(ds.shuffle(seed=2)), sample=16, mp_workers=2)


def _pipe(src, seed=4):
    return grain.MapDataset.source(src).shuffle(seed=seed).to_iter_dataset()


def test_shuffled_pipeline_restores_exactly(ds):
    testing.assert_equal_output_after_checkpoint(_pipe(HuggingFaceDataSource(ds)))
    testing.check_deterministic(lambda: _pipe(HuggingFaceDataSource(ds)))


def _labels(rows):
    return [int(r["label"]) for r in rows]


@pytest.mark.parametrize(("k", "k2"), [(2, 1), (0, 2), (2, 3)])
def test_restore_into_another_worker_count(ds, k, k2):
    src = HuggingFaceDataSource(ds)
    full = _labels(_pipe(src))

    def make(workers):
        p = _pipe(src)
        return p.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers)) if workers else p

    it = iter(make(k))
    head = _labels(next(it) for _ in range(13))
    state = it.get_state()
    getattr(it, "close", lambda: None)()
    it2 = iter(make(k2))
    if k2 == 0:
        state = grain.runtime.elastic.restore_state(
            state, grain.runtime.elastic.elastic_target(it2), "test"
        )
    it2.set_state(state)
    rest = _labels(it2)
    getattr(it2, "close", lambda: None)()
    assert head == full[:13]
    assert sorted(head + rest) == sorted(full) and len(head + rest) == N


def test_restore_across_jax_process_counts(ds, tmp_path):
    src = HuggingFaceDataSource(ds)

    def pipe(p, n):
        base = grain.MapDataset.source(src).shuffle(seed=5)
        return base[p::n].to_iter_dataset()

    read = []
    for p in range(2):  # 2 processes read 6 rows each, in lockstep
        it = iter(pipe(p, 2))
        read += _labels(next(it) for _ in range(6))
        gc.write_state_file(tmp_path, it.get_state(), p, 2)
    for p2 in range(3):  # 3 processes continue
        it = iter(pipe(p2, 3))
        restore_across_process_counts(it, tmp_path, p2, 3)
        read += _labels(it)
    assert sorted(read) == list(range(N))


def test_another_dataset_is_refused(ds):
    it = iter(_pipe(HuggingFaceDataSource(ds)))
    next(it)
    other = datasets.Dataset.from_dict(table_dict(N, start=1000))
    it2 = iter(_pipe(HuggingFaceDataSource(other)))
    with pytest.raises(grain.state.StateMismatchError):
        it2.set_state(it.get_state())


def test_stage_conforms(ds):
    import functools

    other = datasets.Dataset.from_dict(table_dict(N, start=1000))
    testing.check_stage(
        functools.partial(_pipe, HuggingFaceDataSource(ds)),
        foreign=functools.partial(_pipe, HuggingFaceDataSource(other)),
    )


def test_many_chunk_tables_read_chunk_by_chunk():
    parts = [datasets.Dataset.from_dict(table_dict(7, 7 * c)) for c in range(5)]
    d = datasets.concatenate_datasets(parts).shuffle(seed=2)
    assert len(d.data.table.to_batches()) > 1
    src = HuggingFaceDataSource(d)
    _check_rows(src, d.with_format("numpy"), [34, 0, 8, 8, 20, 13, 1])


def test_plain_wrapper_reads_chunks_through_datasets_getitems():
    # docs/differences.md: MapDataset.source over the dataset itself reads chunks through datasets'
    # __getitems__ (batch formatting: float64 -> float32); Grain reads dataset[i] per row.
    d = datasets.Dataset.from_dict({"x": [1.5, 2.5, 3.5]}).with_format("numpy")
    plain = grain.MapDataset.source(d)
    assert isinstance(plain[0]["x"], np.float64)
    assert isinstance(list(plain.to_iter_dataset())[0]["x"], np.float32)
    ours = grain.MapDataset.source(HuggingFaceDataSource(d))
    assert isinstance(ours[0]["x"], np.float64)
    assert all(isinstance(r["x"], np.float64) for r in ours.to_iter_dataset())
