"""A corrupted chunk of an ArrayRecord file is reported with the file's path and the record's index,
in process and through ``mp_prefetch`` workers. The files are written by the real ArrayRecord writer
(uncompressed, one record per chunk) and corrupted by flipping bytes of one record's stored data."""

from __future__ import annotations

import pickle

import pytest
from array_record.python.array_record_module import ArrayRecordWriter
from grain_plugin_arrayrecord import ArrayRecordDataSource, FileInstruction, RecordReadError

import grain_core as grain

N = 40
BAD = 17


def _payload(i: int) -> bytes:
    return f"<record {i:05d}>".encode() * 8


def _write(path, corrupt: int | None = None) -> str:
    w = ArrayRecordWriter(str(path), "group_size:1,uncompressed")
    for i in range(N):
        w.write(_payload(i))
    w.close()
    if corrupt is not None:
        data = bytearray(path.read_bytes())
        at = data.find(_payload(corrupt))
        assert at > 0 and data.count(_payload(corrupt)) == 1
        for k in range(at + 10, at + 14):  # inside the record's chunk data
            data[k] ^= 0xFF
        path.write_bytes(bytes(data))
    return str(path)


@pytest.fixture
def files(tmp_path):
    return _write(tmp_path / "clean.array_record"), _write(tmp_path / "bad.array_record", corrupt=BAD)


def _check(err: BaseException, path: str, index: int, record: int) -> None:
    message = str(err)
    assert path in message
    assert f"record {index} (record {record} of file {path!r})" in message
    assert "Corrupted" in message  # the reader's own diagnosis is kept


def test_single_read_names_file_and_index(files):
    _, bad = files
    src = ArrayRecordDataSource(bad)
    assert src[BAD - 1] == _payload(BAD - 1) and src[BAD + 1] == _payload(BAD + 1)
    with pytest.raises(RecordReadError) as raised:
        src[BAD]
    _check(raised.value, bad, BAD, BAD)
    assert (raised.value.path, raised.value.index, raised.value.record) == (bad, BAD, BAD)


def test_bulk_read_singles_out_the_bad_record(files):
    clean, bad = files
    src = ArrayRecordDataSource([clean, bad])
    with pytest.raises(RecordReadError) as raised:
        src.__getitems__(list(range(N, 2 * N)))
    _check(raised.value, bad, N + BAD, BAD)
    with pytest.raises(RecordReadError) as raised:
        list(src)
    _check(raised.value, bad, N + BAD, BAD)


def test_index_counts_file_instruction_skips(files):
    _, bad = files
    src = ArrayRecordDataSource([FileInstruction(bad, skip=5, take=20, examples_in_shard=N)])
    with pytest.raises(RecordReadError) as raised:
        src[BAD - 5]
    _check(raised.value, bad, BAD - 5, BAD)


def test_error_survives_pickling(files):
    _, bad = files
    with pytest.raises(RecordReadError) as raised:
        ArrayRecordDataSource(bad)[BAD]
    copy = pickle.loads(pickle.dumps(raised.value))
    assert (type(copy), str(copy), copy.path, copy.index) == (
        RecordReadError, str(raised.value), bad, BAD
    )


def test_in_process_pipeline_names_file_and_index(files):
    _, bad = files
    ds = grain.MapDataset.source(ArrayRecordDataSource(bad)).to_iter_dataset()
    with pytest.raises(RecordReadError) as raised:
        list(ds)
    _check(raised.value, bad, BAD, BAD)


def test_mp_prefetch_names_file_and_index(files):
    """The worker's error crosses the process boundary whole: same type, same message."""
    _, bad = files
    ds = grain.MapDataset.source(ArrayRecordDataSource(bad)).to_iter_dataset()
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    with pytest.raises(RecordReadError) as raised:
        list(ds)
    _check(raised.value, bad, BAD, BAD)
