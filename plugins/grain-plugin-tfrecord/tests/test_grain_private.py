"""Grain's private TFRecord classes (``grain_plugin_tfrecord.grain_private``), which the alias maps
``grain._src.python.dataset.sources.tfrecord_dataset._TFRecordReader`` /
``_TFRecordDatasetIterator`` to: Grain's contract and private attributes, and errors."""

from __future__ import annotations

import io
import pathlib

import pytest
from grain_plugin_tfrecord import TFRecordCorruptionError, TFRecordIterDataset, write_tfrecords
from grain_plugin_tfrecord.grain_private import TFRecordDatasetIterator, TFRecordReader

import grain_core as grain
from grain_core.state import StateMismatchError

RECORDS = [b"", b"a", b"hello world", bytes(range(256))]


@pytest.fixture
def path(tmp_path) -> pathlib.Path:
    p = tmp_path / "data.tfrecord"
    write_tfrecords(p, RECORDS)
    return p


def test_reader_reads_self_reader_and_seeks(path):
    reader = TFRecordReader(path)
    assert reader._reader.mode == "rb"
    assert next(reader) == b""
    offset = reader.tell()
    assert list(reader) == RECORDS[1:]
    with pytest.raises(StopIteration):
        next(reader)
    reader.seek(offset)
    assert next(reader) == b"a"
    reader.close()
    assert reader._reader.closed


def test_a_subclass_may_skip_init_and_set_any_binary_reader(path):
    class BytesReader(TFRecordReader):
        def __init__(self, data: bytes):
            self._reader = io.BytesIO(data)

    assert list(BytesReader(path.read_bytes())) == RECORDS


def test_corruption_and_truncation_raise_value_errors_naming_the_offset(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    with pytest.raises(TFRecordCorruptionError, match="CRC does not match"):
        list(_bytes_reader(bytes(data)))
    with pytest.raises(ValueError, match="truncated"):
        list(_bytes_reader(path.read_bytes()[:-3]))
    with pytest.raises(ValueError, match="byte offset 0"):
        list(_bytes_reader(b"\x1f\x8b" + b"\0" * 20))


def _bytes_reader(data: bytes) -> TFRecordReader:
    reader = TFRecordReader.__new__(TFRecordReader)
    reader._reader = io.BytesIO(data)
    return reader


def test_iterator_state_is_grains_and_restores(path):
    it = TFRecordDatasetIterator(path)
    assert [next(it), next(it)] == RECORDS[:2]
    state = it.get_state()
    assert state == {"reader_offset": 12 + 4 + 12 + 1 + 4}
    rest = list(it)
    again = TFRecordDatasetIterator(path)
    again.set_state(state)
    assert list(again) == rest == RECORDS[2:]
    for bad in ({"reader_offset": -1}, {"offset": 3}, {"reader_offset": "3"}):
        with pytest.raises((StateMismatchError, TypeError)):
            again.set_state(bad)
    again.close()
    again.close()
    with pytest.raises(ValueError):
        next(again)


def test_subclass_chain_like_maxtexts_gcs_reader(path):
    class MemReader(TFRecordReader):
        def __init__(self, p: str):
            self._reader = io.BytesIO(pathlib.Path(p.removeprefix("mem://")).read_bytes())

    class MemIterator(TFRecordDatasetIterator):
        def __init__(self, p: str):
            grain.DatasetIterator.__init__(self)
            self._reader = MemReader(p)

    class MemDataset(TFRecordIterDataset):
        def __iter__(self):
            return MemIterator(self._path)

    ds = MemDataset(f"mem://{path}")  # not a local file: the subclass reads it
    assert ds._path == f"mem://{path}"
    assert list(ds.map(len)) == [len(r) for r in RECORDS]
    grain.testing.assert_equal_output_after_checkpoint(ds)
    with pytest.raises(FileNotFoundError):
        TFRecordIterDataset(f"mem://{path}")  # the plugin's own reader still needs a file
