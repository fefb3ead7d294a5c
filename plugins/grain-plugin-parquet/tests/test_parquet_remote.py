"""Parquet sources over remote files: an HTTP range server and moto's S3 server on loopback, and
fsspec's memory filesystem; rows equal to the local files', same checkpoints."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from grain_plugin_parquet import ParquetDataSource, ParquetIterDataset

from grain_core import testing
from grain_core.testing.servers import RangeHTTPServer, S3Server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pq_remote")
    names = []
    for f in range(2):
        t = pa.table({"x": np.arange(f * 100, f * 100 + 100), "s": [f"r{i}" for i in range(100)]})
        pq.write_table(t, d / f"part{f}.parquet", row_group_size=32)
        names.append(f"part{f}.parquet")
    return d, names


def _rows(src):
    return [(int(r["x"]), str(r["s"])) for r in src.__getitems__(list(range(len(src))))]


def test_http_urls_read_through_fsspec(files):
    d, names = files
    local = ParquetDataSource([str(d / n) for n in names])
    with RangeHTTPServer(d) as server:
        remote = ParquetDataSource([f"{server.url}/{n}" for n in names])
        assert len(remote) == 200 and _rows(remote) == _rows(local)
        it_local = [int(r["x"]) for r in ParquetIterDataset(str(d / names[0]))]
        ds = ParquetIterDataset(f"{server.url}/{names[0]}")
        assert [int(r["x"]) for r in ds] == it_local
        testing.assert_equal_output_after_checkpoint(ds, max_elements=60)
        # Several remote files: interleaved (as in Grain), checkpointable across them.
        both = ParquetIterDataset([f"{server.url}/{n}" for n in names])
        assert sorted(int(r["x"]) for r in both) == list(range(200))
        testing.assert_equal_output_after_checkpoint(both, max_elements=200)


def test_s3_with_storage_options_or_a_filesystem(files):
    d, names = files
    local = ParquetDataSource([str(d / n) for n in names])
    with S3Server() as s3:
        fs = s3.filesystem()
        fs.mkdir("pqbucket")
        for n in names:
            fs.put(str(d / n), f"pqbucket/{n}")
        urls = [f"s3://pqbucket/{n}" for n in names]
        by_options = ParquetDataSource(urls, storage_options=s3.storage_options)
        assert _rows(by_options) == _rows(local)
        by_fs = ParquetDataSource([f"pqbucket/{n}" for n in names], filesystem=fs)
        assert _rows(by_fs) == _rows(local)
        ds = ParquetIterDataset(urls[1], storage_options=s3.storage_options)
        assert [int(r["x"]) for r in ds] == list(range(100, 200))
    with pytest.raises(ValueError, match="not both"):
        ParquetDataSource(urls, filesystem=fs, storage_options={})


def test_memory_urls(files):
    import fsspec

    d, names = files
    mem = fsspec.filesystem("memory")
    mem.pipe("/pq_remote/a.parquet", (d / names[0]).read_bytes())
    try:
        src = ParquetDataSource("memory://pq_remote/a.parquet")
        assert [int(r["x"]) for r in src.__getitems__([5, 99, 0])] == [5, 99, 0]
    finally:
        mem.rm("/pq_remote/a.parquet")
