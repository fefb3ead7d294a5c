"""ArrayRecord over fsspec filesystems: real files (array_record's writer, several options) served by
real servers on loopback (an HTTP range server, moto's S3 server, fsspec's memory filesystem), read
by this plugin's own reader and compared record by record with array_record's C++ reader."""

from __future__ import annotations

import importlib.util
import os
import pickle

import fsspec
import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter
from fsspec.implementations.memory import MemoryFileSystem
from grain_plugin_arrayrecord import ArrayRecordDataSource, RecordReadError, remote, riegeli

import grain_core as grain
from grain_core import testing
from grain_core.filesystems import RetryPolicy
from grain_core.testing.servers import RangeHTTPServer, S3Server

pytestmark = pytest.mark.timeout(180)
HAS_MP = importlib.util.find_spec("grain_core.runtime.multiprocess") is not None

# Writer options: one record per chunk, several per chunk, each compression, the default (brotli,
# group_size 65536) and block-padded chunks.
OPTIONS = [
    "group_size:1",
    "group_size:64",
    "group_size:7,zstd",
    "group_size:7,brotli",
    "group_size:7,snappy",
    "group_size:7,uncompressed",
    "",
    "group_size:5,uncompressed,pad_to_block_boundary:true",
]


def _records(seed: int, n: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([0, 1, 17, 1000, 70_000], size=n, p=[0.05, 0.1, 0.35, 0.4, 0.1])
    return [rng.bytes(int(s)) if s % 2 else bytes([seed % 256]) * int(s) for s in sizes]


def _name(option: str) -> str:
    return "f_" + (option.replace(":", "-").replace(",", "_") or "default") + ".array_record"


def _write(path, records, option) -> None:
    w = ArrayRecordWriter(str(path), option)
    for r in records:
        w.write(r)
    w.close()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("remote_ar")
    for k, option in enumerate(OPTIONS):
        _write(d / _name(option), _records(k, 150), option)
    return d


def _reference(path) -> list[bytes]:
    r = ArrayRecordReader(str(path))
    try:
        return r.read(list(range(r.num_records())))
    finally:
        r.close()


@pytest.fixture
def http(data_dir):
    with RangeHTTPServer(data_dir) as server:
        yield server


@pytest.mark.parametrize("option", OPTIONS)
def test_http_reads_every_record_like_array_record(http, data_dir, option):
    expected = _reference(data_dir / _name(option))
    src = ArrayRecordDataSource(f"{http.url}/{_name(option)}")
    assert len(src) == len(expected)
    order = np.random.default_rng(0).permutation(len(src)).tolist()
    assert src.__getitems__(order) == [expected[i] for i in order]
    assert [src[i] for i in range(0, len(src), 13)] == expected[::13]
    assert src[-1] == expected[-1]
    assert list(src) == expected


def test_s3_with_storage_options_a_filesystem_globs_and_the_environment(data_dir, monkeypatch):
    names = [_name(o) for o in OPTIONS[:3]]
    expected = [r for n in names for r in _reference(data_dir / n)]
    with S3Server() as s3:
        fs = s3.filesystem()
        fs.mkdir("bkt")
        for n in names:
            fs.put(str(data_dir / n), f"bkt/{n}")
        order = np.random.default_rng(1).permutation(len(expected)).tolist()
        by_url = ArrayRecordDataSource(
            [f"s3://bkt/{n}" for n in names], storage_options=s3.storage_options
        )
        assert by_url.__getitems__(order) == [expected[i] for i in order]
        by_fs = ArrayRecordDataSource([f"bkt/{n}" for n in names], filesystem=fs)
        assert by_fs.__getitems__(order) == [expected[i] for i in order]
        pattern = ArrayRecordDataSource(
            "s3://bkt/f_group_size-*", storage_options=s3.storage_options
        )
        assert pattern.paths == sorted(f"s3://bkt/{n}" for n in names if "group_size-" in n)
        # No options at all: the URL's default filesystem and its environment.
        import s3fs

        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.SECRET)
        s3fs.S3FileSystem.clear_instance_cache()
        try:
            plain = ArrayRecordDataSource([f"s3://bkt/{n}" for n in names])
            assert plain.__getitems__(order[:50]) == [expected[i] for i in order[:50]]
        finally:
            s3fs.S3FileSystem.clear_instance_cache()


def test_memory_filesystem_and_pickling(data_dir):
    mem = fsspec.filesystem("memory")
    name = _name("group_size:64")
    mem.pipe(f"/test_remote/{name}", (data_dir / name).read_bytes())
    expected = _reference(data_dir / name)
    try:
        src = ArrayRecordDataSource(f"memory://test_remote/{name}")
        assert list(src) == expected
        copy = pickle.loads(pickle.dumps(src))
        assert copy[5] == expected[5] and repr(copy) == repr(src)
        testing.check_source(src)
    finally:
        mem.rm(f"/test_remote/{name}")
        remote.clear_caches()


def test_a_shuffled_batch_is_few_coalesced_concurrent_requests_and_the_index_is_read_once(
    http, data_dir
):
    name = _name("group_size:1")
    url = f"{http.url}/{name}"
    src = ArrayRecordDataSource(url)
    len(src)  # size + tail (footer included): the index costs two requests, once
    assert http.requests == 2
    before = http.requests
    n = len(src)
    src.__getitems__(np.random.default_rng(2).permutation(n).tolist())
    # The whole file's chunks are one span well under the 8 MiB request limit: one request.
    assert http.requests - before == 1
    again = ArrayRecordDataSource(url)  # another source on the same file: cached index
    before = http.requests
    assert again[3] == _reference(data_dir / name)[3]
    assert http.requests - before == 1


def test_coalescing_keeps_far_apart_chunks_separate():
    begins = np.array([0, 100, 200_000, 200_050, 10_000_000])
    ends = begins + 50
    got = remote.coalesce(begins, ends, max_gap=64 << 10, max_request=1 << 20)
    assert got == [(0, 2, 0, 150), (2, 4, 200_000, 200_100), (4, 5, 10_000_000, 10_000_050)]
    capped = remote.coalesce(np.array([0, 60, 120]), np.array([50, 110, 170]), 100, 110)
    assert capped == [(0, 2, 0, 110), (2, 3, 120, 170)]


def _greedy_requests(begins, ends, max_gap: int, max_request: int):
    """The rule ``coalesce`` implements, span by span: a span joins the request before it while
    the hole is at most ``max_gap`` and the request stays within ``max_request`` bytes."""
    out, i = [], 0
    while i < len(begins):
        j, b, e = i + 1, int(begins[i]), int(ends[i])
        while j < len(begins) and begins[j] - e <= max_gap and ends[j] - b <= max_request:
            e, j = int(ends[j]), j + 1
        out.append((i, j, b, e))
        i = j
    return out


def test_coalescing_follows_the_greedy_rule_on_random_spans():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(0, 60))
        sizes, holes = rng.integers(1, 3000, n), rng.integers(0, 5000, n)
        begins = np.cumsum(holes + np.concatenate(([0], sizes[:-1]))) if n else np.zeros(0, int)
        ends = begins + sizes
        max_gap, max_request = int(rng.integers(0, 4000)), int(rng.integers(1, 20_000))
        assert remote.coalesce(begins, ends, max_gap, max_request) == _greedy_requests(
            begins, ends, max_gap, max_request
        )


def test_transient_failures_are_retried_and_give_up_after_bounded_tries(http, data_dir):
    name = _name("group_size:7,zstd")
    expected = _reference(data_dir / name)
    http.fail_next(3)  # size query and reads answer 503 three times, then succeed
    src = ArrayRecordDataSource(f"{http.url}/{name}")
    assert src.__getitems__([5, 1, 140]) == [expected[5], expected[1], expected[140]]
    reader = remote.RemoteReader(
        src._open(0)._fs, f"{http.url}/{name}", retry=RetryPolicy(attempts=3, initial_delay_s=0.01)
    )
    reader.index()
    remote.clear_caches()  # chunks too: the next read must go to the server
    reader.index()
    before = http.requests
    http.fail_next(10**6)
    with pytest.raises(OSError, match=f"{name}.*failed after 3 tries"):
        reader.read([0])
    assert http.requests - before == 3  # bounded: exactly the policy's tries
    http.fail_next(0)


def test_missing_file_and_bad_arguments_are_clear(http, data_dir):
    with pytest.raises(FileNotFoundError, match="no such file.*nope.array_record"):
        len(ArrayRecordDataSource(f"{http.url}/nope.array_record"))
    with pytest.raises(ValueError, match="either filesystem= or storage_options="):
        ArrayRecordDataSource("s3://b/x", filesystem=object(), storage_options={})
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        ArrayRecordDataSource("s3://b/x", storage_options=["anon"])
    with pytest.raises(TypeError, match="fsspec filesystem"):
        ArrayRecordDataSource("b/x", filesystem=object())


def _corrupt_copy(data_dir, tmp_path, name: str, flip_at: int | None, cut: int | None, tag: str):
    raw = bytearray((data_dir / name).read_bytes())
    if flip_at is not None:
        raw[flip_at : flip_at + 8] = b"\xff" * 8
    if cut is not None:
        raw = raw[:cut]
    bad = tmp_path / (tag + name)
    bad.write_bytes(bytes(raw))
    return bad


def test_corrupt_and_truncated_files_name_file_and_offset(data_dir, tmp_path):
    name = _name("group_size:7,zstd")
    index = ArrayRecordDataSource(str(data_dir / name))
    with RangeHTTPServer(tmp_path) as server:
        # A damaged chunk: its compressed values no longer decode.
        chunk_begin = remote.RemoteReader(fsspec.filesystem("file"), str(data_dir / name)).index()
        c = 3
        b = int(chunk_begin.chunk_offsets[c])
        bad = _corrupt_copy(data_dir, tmp_path, name, b + 60, None, "bad_")
        src = ArrayRecordDataSource(f"{server.url}/{bad.name}")
        first = int(chunk_begin.record_starts[c])
        assert src[0] == index[0]
        with pytest.raises(RecordReadError, match=f"record {first + 1} .*{bad.name}") as info:
            src.__getitems__([0, first + 1, first + 2])
        assert info.value.record == first + 1 and info.value.index == first + 1
        assert isinstance(info.value.__cause__, riegeli.ArrayRecordFormatError)
        assert info.value.__cause__.offset == b and f"byte offset {b}" in str(info.value)
        # Truncated: cut inside the last block.
        cut = _corrupt_copy(
            data_dir, tmp_path, name, None, (data_dir / name).stat().st_size - 1000, "cut_"
        )
        with pytest.raises(riegeli.ArrayRecordFormatError, match=f"{cut.name}.*byte offset"):
            len(ArrayRecordDataSource(f"{server.url}/{cut.name}"))
        # Not an ArrayRecord file at all.
        (tmp_path / "junk.bin").write_bytes(os.urandom(3 * 65536))
        with pytest.raises(ValueError, match="junk.bin"):
            len(ArrayRecordDataSource(f"{server.url}/junk.bin"))
        # The error survives pickling (it crosses mp_prefetch's process boundary).
        again = pickle.loads(pickle.dumps(info.value.__cause__))
        assert again.offset == b and str(again) == str(info.value.__cause__)


def test_checkpoint_restore_on_remote_data(http, data_dir):
    src = ArrayRecordDataSource([f"{http.url}/{_name(o)}" for o in OPTIONS[:2]])
    ds = grain.MapDataset.source(src).seed(4).shuffle().map(len)
    testing.assert_equal_output_after_checkpoint(ds, max_elements=120)
    threaded = (
        grain.MapDataset.source(src)
        .seed(4)
        .shuffle()
        .to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=16))
    )
    testing.assert_equal_output_after_checkpoint(threaded.map(len), max_elements=120)


@pytest.mark.skipif(not HAS_MP, reason="mp_prefetch not available")
def test_mp_prefetch_restores_across_worker_counts_on_remote_data(http, data_dir):
    names = [_name(o) for o in OPTIONS[:2]]
    expected = [r for n in names for r in _reference(data_dir / n)]
    src = ArrayRecordDataSource([f"{http.url}/{n}" for n in names])

    def pipe(k):
        ds = grain.MapDataset.source(src).seed(9).shuffle().to_iter_dataset().map(bytes)
        return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=k))

    with iter(pipe(2)) as it:
        first = [next(it) for _ in range(40)]
        state = it.get_state()
    with iter(pipe(3)) as it:
        it.set_state(state)
        rest = list(it)
    assert sorted(first + rest) == sorted(expected)


def test_restore_across_process_counts_on_remote_data(http, data_dir, tmp_path):
    from grain_core import checkpoint as gc
    from grain_core.checkpoint.files import restore_across_process_counts

    names = [_name(o) for o in OPTIONS[:2]]
    expected = [r for n in names for r in _reference(data_dir / n)]
    src = ArrayRecordDataSource([f"{http.url}/{n}" for n in names])

    def pipe(p, n):
        return grain.MapDataset.source(src).seed(1).shuffle()[p::n].to_iter_dataset()

    read = []
    for p in range(2):  # two processes read 40 records each and save their states...
        it = iter(pipe(p, 2))
        read += [next(it) for _ in range(40)]
        gc.write_state_file(tmp_path, it.get_state(), p, 2)
    for p2 in range(3):  # ...and three processes finish the epoch
        it = iter(pipe(p2, 3))
        restore_across_process_counts(it, tmp_path, p2, 3)
        read += list(it)
    assert sorted(read) == sorted(expected)


class _CountingMemoryFS(MemoryFileSystem):
    """fsspec's memory filesystem, recording each ``sizes`` call's number of paths."""

    calls: list[tuple[str, int]] = []

    def sizes(self, paths):
        self.calls.append(("sizes", len(paths)))
        return super().sizes(paths)


def test_the_indexes_of_many_files_are_read_together(data_dir, tmp_path, monkeypatch):
    """Opening a source over several remote files reads their sizes in one call, their tails in
    one batch of concurrent ranges, and the footers longer than a tail in one: a few round trips,
    not two per file. The indexes are those each file's own read gives."""
    fs = _CountingMemoryFS(skip_instance_cache=True)
    real_fetch = remote.fetch_ranges

    def counted_fetch(fs_, paths, starts, ends, **kwargs):
        fs.calls.append(("ranges", len(paths)))
        return real_fetch(fs_, paths, starts, ends, **kwargs)

    monkeypatch.setattr(remote, "fetch_ranges", counted_fetch)
    # a tail of 128 KiB: 64 KiB before the postscript's block, less than the ~90 KiB footer of
    # 60,000 one-record chunks (the others' footers fit)
    monkeypatch.setattr(remote, "_TAIL_BYTES", 128 << 10)
    long_name = "many_chunks.array_record"
    _write(tmp_path / long_name, [bytes([k % 251]) for k in range(60_000)], "group_size:1")
    names = [_name(o) for o in OPTIONS]
    for name in names:
        fs.pipe(f"/idx/{name}", (data_dir / name).read_bytes())
    fs.pipe(f"/idx/{long_name}", (tmp_path / long_name).read_bytes())
    paths = [f"memory:///idx/{n}" for n in [*names, long_name]]
    remote.clear_caches()
    fs.calls.clear()
    src = ArrayRecordDataSource(paths, filesystem=fs)
    assert len(src) == 150 * len(OPTIONS) + 60_000
    assert fs.calls == [("sizes", 9), ("ranges", 9), ("ranges", 1)]
    together = {p: remote._INDEXES.get((fs, p.removeprefix("memory://"))) for p in paths}
    remote.clear_caches()
    for p in paths:
        alone = remote.RemoteReader(fs, p.removeprefix("memory://")).index()
        assert np.array_equal(alone.chunk_offsets, together[p].chunk_offsets)
        assert np.array_equal(alone.record_starts, together[p].record_starts)
    assert src[150 * len(OPTIONS) + 59_999] == bytes([59_999 % 251])


def test_a_bad_file_among_many_is_named_by_its_own_error(http, data_dir, tmp_path):
    names = [_name(o) for o in OPTIONS[:3]]
    with pytest.raises(FileNotFoundError, match="no such file.*nope.array_record"):
        len(ArrayRecordDataSource([f"{http.url}/{n}" for n in [*names, "nope.array_record"]]))
    (tmp_path / "junk.bin").write_bytes(os.urandom(3 * 65536))
    for name in names:
        (tmp_path / name).write_bytes((data_dir / name).read_bytes())
    with RangeHTTPServer(tmp_path) as server:
        src = ArrayRecordDataSource([f"{server.url}/{n}" for n in [names[0], "junk.bin", names[1]]])
        with pytest.raises(ValueError, match="junk.bin"):
            len(src)
