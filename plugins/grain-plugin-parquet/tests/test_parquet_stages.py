"""The conformance kit's stage checks for ParquetIterDataset and ParquetDataSource."""

import functools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from grain_plugin_parquet import ParquetDataSource, ParquetIterDataset

import grain_core as grain
from grain_core import testing


def _write(path, start, n):
    ids = np.arange(start, start + n, dtype=np.int64)
    pq.write_table(pa.table({"id": ids, "x": ids.astype(np.float32)}), str(path), row_group_size=7)
    return str(path)


def make_iter(path):
    return ParquetIterDataset(path)


def make_source(paths):
    return grain.MapDataset.source(ParquetDataSource(paths)).shuffle(seed=3)


def test_parquet_iter_dataset_conforms(tmp_path):
    a = _write(tmp_path / "a.parquet", 0, 23)
    b = _write(tmp_path / "b.parquet", 100, 30)
    testing.check_stage(functools.partial(make_iter, a), foreign=functools.partial(make_iter, b))


def test_parquet_data_source_conforms(tmp_path):
    paths = [_write(tmp_path / f"p{f}.parquet", 100 * f, 15) for f in range(2)]
    testing.check_stage(
        functools.partial(make_source, paths), foreign=functools.partial(make_source, paths[:1])
    )
