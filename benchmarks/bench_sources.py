"""Issue 4 workloads: ArrayRecord random access, Parquet iteration and (grain_core only) Parquet
random access, against google's grain."""

from __future__ import annotations

import functools
import os

import numpy as np
from harness import Workload, scratch_dir

AR_RECORDS = 100_000
AR_FILES = 4
PQ_FILES = 8
PQ_ROWS = 25_000
_CACHE: dict[str, object] = {}


def _len(x):
    return len(x)


def _ar_setup():
    if "ar" in _CACHE:
        return _CACHE["ar"]
    from array_record.python.array_record_module import ArrayRecordWriter

    d = str(scratch_dir("bench_ar_"))
    rng = np.random.default_rng(0)
    payload = rng.integers(0, 256, size=1024 + AR_RECORDS, dtype=np.uint8).tobytes()
    paths, per = [], AR_RECORDS // AR_FILES
    for f in range(AR_FILES):
        p = os.path.join(d, f"data-{f:05d}-of-{AR_FILES:05d}.array_record")
        w = ArrayRecordWriter(p, "group_size:1")
        for i in range(per):
            k = f * per + i
            w.write(payload[k : k + 1024])
        w.close()
        paths.append(p)
    _CACHE["ar"] = paths
    return paths


def _ar_pipeline(lib, paths):
    src = lib.sources.ArrayRecordDataSource(paths)
    return lib.MapDataset.source(src).shuffle(seed=0).map(_len).batch(64).to_iter_dataset()


def _ar_reference(paths, per_call=64):
    """The ArrayRecord reader's own batched ``read(indices)`` over the same shuffled order, with the
    options ``ArrayRecordDataSource`` opens its readers with, ``per_call`` indices of the order at a
    time (split per file). The reader is much faster with large batches (it reads the records of
    one call in parallel in its own thread pool), so the fair reference is the best of the rows."""
    from array_record.python.array_record_module import ArrayRecordReader
    from grain_plugin_arrayrecord.source import _options_string

    import grain_core

    order = np.asarray(list(grain_core.MapDataset.range(AR_RECORDS).shuffle(seed=0)))
    per = AR_RECORDS // AR_FILES
    readers = [ArrayRecordReader(p, _options_string(None)) for p in paths]
    total = 0
    for s in range(0, AR_RECORDS, per_call):
        chunk = order[s : s + per_call]
        fids = chunk // per
        for f in np.unique(fids):
            recs = readers[f].read((chunk[fids == f] - f * per).tolist())
            total += len(recs)
    for r in readers:
        r.close()
    return total


def _ar_seek_reference(paths):
    """The reader's sequential API over the same shuffled order: ``seek(i)`` then ``read()`` per
    record, one thread, readers opened with ``max_parallelism:0`` (the only reader path that
    option changes: it keeps ``read()`` from scheduling readahead in the reader's thread pool).
    It never touches the pool but holds the GIL while it reads (see docs/sources.md)."""
    from array_record.python.array_record_module import ArrayRecordReader
    from grain_plugin_arrayrecord.source import _options_string

    import grain_core

    order = grain_core.MapDataset.range(AR_RECORDS).shuffle(seed=0)
    per = AR_RECORDS // AR_FILES
    readers = [ArrayRecordReader(p, _options_string({"max_parallelism": 0})) for p in paths]
    total = 0
    for k in order:
        r = readers[k // per]
        r.seek(k % per)
        r.read()
        total += 1
    for r in readers:
        r.close()
    return total


# 64: one batch per call; 16,000: the largest chunk to_iter_dataset reads at once here (250 batches).
_AR_REFERENCES = {
    f"read(indices) {n}/call": functools.partial(_ar_reference, per_call=n)
    for n in (64, 1024, 16_000)
}
_AR_REFERENCES["seek()+read() 1/call, max_parallelism:0"] = _ar_seek_reference


def _pq_setup():
    if "pq" in _CACHE:
        return _CACHE["pq"]
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = str(scratch_dir("bench_pq_"))
    paths = []
    for f in range(PQ_FILES):
        ids = np.arange(f * PQ_ROWS, (f + 1) * PQ_ROWS, dtype=np.int64)
        table = pa.table(
            {
                "id": ids,
                "x": ids.astype(np.float32),
                "label": (ids % 10).astype(np.int32),
                "text": [f"t{i}" for i in range(PQ_ROWS)],
            }
        )
        p = os.path.join(d, f"part-{f}.parquet")
        pq.write_table(table, p, row_group_size=5_000)
        paths.append(p)
    _CACHE["pq"] = paths
    return paths


def _pq_pipeline(lib, paths):
    ds = lib.MapDataset.source(paths).map(lib.experimental.ParquetIterDataset)
    interleave = getattr(lib.experimental, "InterleaveIterDataset", None)
    if interleave is None:
        raise NotImplementedError(f"{lib.__name__} has no experimental.InterleaveIterDataset")
    return interleave(ds, cycle_length=4)


def _pq_random_access_pipeline(lib, paths):
    """ParquetDataSource (grain_core only; grain reports n/a) globally shuffled, batched.

    Shuffling across 40 row groups of 5k rows with the default 256 MiB cache: every row group is
    decoded once and served from the cache afterwards; ``__getitems__`` groups each chunk's
    indices by row group."""
    src = lib.sources.ParquetDataSource(paths, columns=["id", "x", "label"])
    return lib.MapDataset.source(src).shuffle(seed=0).batch(64).to_iter_dataset()


def _pq_chain_pipeline(lib, paths):
    """ParquetIterDataset chained over the files (without interleave)."""
    import itertools

    return itertools.chain.from_iterable(lib.experimental.ParquetIterDataset(p) for p in paths)


def _pq_reference(paths):
    import pyarrow.parquet as pq

    total = 0
    for p in paths:
        total += len(pq.read_table(p).to_pylist())
    return total


WORKLOADS = [
    Workload(
        "ArrayRecord 100k x 1KiB shuffle.map(len).batch(64) to_iter",
        _ar_pipeline,
        count=len,
        unit="records",
        target=10,
        setup=_ar_setup,
        references=_AR_REFERENCES,
    ),
    Workload(
        "Parquet 8x25k rows ParquetIterDataset + InterleaveIterDataset(4)",
        _pq_pipeline,
        unit="rows",
        target=5,
        setup=_pq_setup,
        references={"pyarrow read_table().to_pylist()": _pq_reference},
    ),
    Workload(
        "Parquet 8x25k rows ParquetDataSource shuffle.batch(64) to_iter (grain has none)",
        _pq_random_access_pipeline,
        compare=False,
        count=lambda batch: len(batch["id"]),
        unit="rows",
        setup=_pq_setup,
        references={"pyarrow read_table().to_pylist()": _pq_reference},
    ),
    Workload(
        "Parquet 8x25k rows ParquetIterDataset chained over files",
        _pq_chain_pipeline,
        unit="rows",
        setup=_pq_setup,
        references={"pyarrow read_table().to_pylist()": _pq_reference},
    ),
]
