"""A batch over several remote ArrayRecord files is one concurrent batch of requests (not one round
trip per file), and chunk hashes are verified; served by a real HTTP range server on loopback from
files written by array_record's writer, and compared with array_record's own reader."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter
from grain_plugin_arrayrecord import ArrayRecordDataSource, RecordReadError, remote, riegeli
from test_remote import _reference

import grain_core as grain
from grain_core.testing.servers import GCSServer, RangeHTTPServer

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("remote_batches")
    rng = np.random.default_rng(0)
    names = []
    for f in range(3):
        name = f"part-{f}.array_record"
        w = ArrayRecordWriter(str(d / name), "group_size:1")
        for _ in range(40):
            w.write(rng.bytes(int(rng.integers(0, 3000))))
        w.close()
        names.append(name)
    return d, names


def test_records_of_several_files_are_one_concurrent_batch(files, monkeypatch):
    d, names = files
    expected = [r for n in names for r in _reference(d / n)]
    calls: list[list[str]] = []
    real = remote.fetch_ranges

    def counted(fs, path, starts, ends, **kw):
        calls.append(list(path))
        return real(fs, path, starts, ends, **kw)

    with RangeHTTPServer(d) as server:
        src = ArrayRecordDataSource([f"{server.url}/{n}" for n in names])
        assert len(src) == len(expected)  # indexes read here
        monkeypatch.setattr(remote, "fetch_ranges", counted)
        before = server.requests
        order = np.random.default_rng(1).permutation(len(src)).tolist()
        assert src.__getitems__(order) == [expected[i] for i in order]
        # one fetch_ranges call holds every file's requests (one coalesced span per file here)
        assert len(calls) == 1 and sorted(set(calls[0])) == sorted(set(calls[0]))
        assert len({p.rsplit("/", 1)[-1] for p in calls[0]}) == len(names)
        assert server.requests - before == len(calls[0]) == len(names)


def test_read_many_matches_reads_one_by_one(files):
    d, names = files
    with RangeHTTPServer(d) as server:
        src = ArrayRecordDataSource([f"{server.url}/{n}" for n in names])
        readers = [src._open(f) for f in range(len(names))]
        rng = np.random.default_rng(2)
        asks = [rng.integers(0, 40, size=k).tolist() for k in (0, 5, 17)]
        got = remote.read_many(list(zip(readers, asks)))
        assert got == [r.read(a) for r, a in zip(readers, asks)]
        assert got[0] == []


def test_a_flipped_byte_is_caught_by_the_chunk_hashes(tmp_path):
    """Uncompressed records: a changed byte still decodes, only the hashes can tell; the error
    names the file and the chunk's byte offset."""
    assert riegeli.VERIFIES_HASHES  # highwayhash-cffi is in the test extra
    path = tmp_path / "clean.array_record"
    w = ArrayRecordWriter(str(path), "group_size:4,uncompressed")
    for k in range(40):
        w.write(bytes([k]) * 500)
    w.close()
    reader = remote.RemoteReader(fsspec.filesystem("file"), str(path))
    idx = reader.index()
    assert reader.read(list(range(40))) == _reference(path)
    c = 5
    begin = int(idx.chunk_offsets[c])
    raw = bytearray(path.read_bytes())
    for where, what in ((begin + 300, "data"), (begin + 20, "header")):
        bad = bytearray(raw)
        bad[where] ^= 0x01
        name = f"bad_{what}.array_record"
        (tmp_path / name).write_bytes(bytes(bad))
        with RangeHTTPServer(tmp_path) as server:
            src = ArrayRecordDataSource(f"{server.url}/{name}")
            assert src[0] == bytes([0]) * 500
            with pytest.raises(RecordReadError, match=f"{name}.*byte offset {begin}") as info:
                src.__getitems__([1, 4 * c + 2])
            assert "hash does not match" in str(info.value)
            assert info.value.record == 4 * c + 2


def test_gcs_emulator_reads_every_record_like_array_record(files):
    """``gs://`` through gcsfs against fake-gcs-server (a GCS emulator) on loopback."""
    d, names = files
    expected = [r for n in names for r in _reference(d / n)]
    with GCSServer() as gcs:
        fs = gcs.filesystem()
        fs.mkdir("bkt")
        for n in names:
            fs.pipe(f"bkt/{n}", (d / n).read_bytes())
        src = ArrayRecordDataSource([f"gs://bkt/{n}" for n in names], filesystem=fs)
        assert len(src) == len(expected)
        order = np.random.default_rng(3).permutation(len(src)).tolist()
        assert src.__getitems__(order) == [expected[i] for i in order]
        ds = grain.MapDataset.source(src).seed(5).shuffle().to_iter_dataset()
        assert sorted(ds) == sorted(expected)


def test_a_remote_pipeline_reads_in_bulk_calls(files, monkeypatch):
    """Sources declare ``bulk_read_size``, so a shuffled pipeline with default ``ReadOptions``
    gives the reader calls of ``remote.BULK_READ_SIZE`` indices (capped by the epoch), with the
    same records in the same order as over the local files."""
    d, names = files
    local = ArrayRecordDataSource([str(d / n) for n in names])
    assert local.bulk_read_size == remote.BULK_READ_SIZE
    sizes: list[int] = []
    real = ArrayRecordDataSource.__getitems__

    def counted(self, keys):
        sizes.append(len(keys))
        return real(self, keys)

    with RangeHTTPServer(d) as server:
        src = ArrayRecordDataSource([f"{server.url}/{n}" for n in names])
        assert src.bulk_read_size == remote.BULK_READ_SIZE
        monkeypatch.setattr(ArrayRecordDataSource, "__getitems__", counted)
        for options in (grain.ReadOptions(), grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)):
            want = list(grain.MapDataset.source(local).seed(3).shuffle().to_iter_dataset(options))
            sizes.clear()
            got = list(grain.MapDataset.source(src).seed(3).shuffle().to_iter_dataset(options))
            assert got == want
            # the first call is one index (it learns the record size), the second the rest (119)
            assert sizes == [1, len(src) - 1], sizes


def test_single_record_chunks_decode_the_same_with_and_without_hashes(files, monkeypatch):
    """With the data hash checked, a one-record chunk's size is taken from its values (its
    compressed copy is not decoded); without hashes the copy is decoded and compared. Both give
    array_record's records."""
    d, names = files
    path = d / names[0]
    data = path.read_bytes()
    reader = remote.RemoteReader(fsspec.filesystem("file"), str(path))
    idx = reader.index()
    spans = [(int(idx.chunk_offsets[c]), int(idx.chunk_offsets[c + 1])) for c in range(len(idx.chunk_offsets) - 1)]
    hashed = [riegeli.decode_chunk(memoryview(data)[b:e], b, "f").record(0) for b, e in spans]
    monkeypatch.setattr(riegeli, "_hash", None)
    plain = [riegeli.decode_chunk(memoryview(data)[b:e], b, "f").record(0) for b, e in spans]
    assert hashed == plain == _reference(path)
