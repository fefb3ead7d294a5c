"""Tests of the TFRecord plugin against files written by TensorFlow's own writer.

``data/*.tfrecord`` were written by ``tf.io.TFRecordWriter`` (``data/write_with_tensorflow.py``, run
manually in a side venv); ``data/expected.json`` holds each record's length and SHA-256 as TensorFlow
read them back; ``data/grain_states.json`` holds google grain 0.2.18's reader states. Neither
TensorFlow nor grain is needed here.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import shutil

import pytest
from grain_plugin_tfrecord import (
    TFRecordCorruptionError,
    TFRecordIterDataset,
    TFRecordWriter,
    masked_crc32c,
    read_records,
    write_tfrecords,
)
from grain_plugin_tfrecord.format import crc32c, crc32c_python

import grain_core as grain
from grain_core import testing
from grain_core.state import StateMismatchError

DATA = pathlib.Path(__file__).parent / "data"
EXPECTED = json.loads((DATA / "expected.json").read_text())["files"]
GRAIN_STATES = json.loads((DATA / "grain_states.json").read_text())["states"]


def _digest(records):
    return [{"length": len(r), "sha256": hashlib.sha256(r).hexdigest()} for r in records]


def test_registered_in_experimental():
    assert grain.experimental.TFRecordIterDataset is TFRecordIterDataset
    testing.check_plugin_listed("tfrecord", "grain-plugin-tfrecord", ["TFRecordIterDataset"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reads_every_record_tensorflow_wrote(name):
    records = list(TFRecordIterDataset(DATA / name))
    assert all(type(r) is bytes for r in records)
    assert _digest(records) == EXPECTED[name]
    assert _digest(read_records(DATA / name)) == EXPECTED[name]


def test_varied_sizes_include_empty_records():
    lengths = [e["length"] for e in EXPECTED["varied_sizes.tfrecord"]]
    assert lengths[0] == 0 and lengths[-1] == 0 and max(lengths) == 70_000
    assert list(TFRecordIterDataset(DATA / "single_empty_record.tfrecord")) == [b""]
    assert list(TFRecordIterDataset(DATA / "empty_file.tfrecord")) == []


def test_crc32c_matches_the_reference_value_and_the_pure_python_fallback():
    assert crc32c(b"123456789") == 0xE3069283  # RFC 3720 check value
    for data in (b"", b"a", bytes(range(256)) * 3):
        assert crc32c(data) == crc32c_python(data)


def test_our_writer_writes_the_bytes_tensorflow_writes(tmp_path):
    for name in (
        "plain.tfrecord",
        "varied_sizes.tfrecord",
        "examples.tfrecord",
        "empty_file.tfrecord",
    ):
        out = tmp_path / name
        assert write_tfrecords(out, read_records(DATA / name)) == len(EXPECTED[name])
        assert out.read_bytes() == (DATA / name).read_bytes(), name


def test_writer_refuses_str_records(tmp_path):
    with TFRecordWriter(tmp_path / "x.tfrecord") as w, pytest.raises(TypeError, match="encode"):
        w.write("text")


def test_state_restores_mid_file_and_matches_grains_offsets():
    ds = TFRecordIterDataset(DATA / "varied_sizes.tfrecord")
    expected = list(ds)
    it = iter(ds)
    for k in range(len(expected) + 1):
        assert it.get_state()["reader_offset"] == GRAIN_STATES[k]["reader_offset"]
        assert it.get_state()["record_index"] == k
        fresh = iter(ds)
        fresh.set_state(it.get_state())
        assert list(fresh) == expected[k:]
        if k < len(expected):
            assert next(it) == expected[k]


def test_grain_state_restores():
    ds = TFRecordIterDataset(DATA / "varied_sizes.tfrecord")
    expected = list(ds)
    for k, grain_state in enumerate(GRAIN_STATES):
        it = iter(ds)
        it.set_state(grain_state)
        assert list(it) == expected[k:]


def test_assert_equal_output_after_checkpoint():
    ds = TFRecordIterDataset(DATA / "plain.tfrecord").map(lambda b: b.decode())
    testing.assert_equal_output_after_checkpoint(ds)


def test_state_of_another_file_or_offset_is_refused_without_change():
    a = iter(TFRecordIterDataset(DATA / "plain.tfrecord"))
    b = iter(TFRecordIterDataset(DATA / "varied_sizes.tfrecord"))
    next(a)
    before = a.get_state()
    with pytest.raises(StateMismatchError, match="path"):
        a.set_state(b.get_state())
    with pytest.raises(StateMismatchError, match="past the end"):
        a.set_state({"reader_offset": 10**9})
    assert a.get_state() == before and next(a) == b"record 1"


def test_misaligned_offset_is_reported_at_the_next_read():
    it = iter(TFRecordIterDataset(DATA / "plain.tfrecord"))
    it.set_state({"reader_offset": 5})
    with pytest.raises(
        TFRecordCorruptionError, match="plain.tfrecord.*byte offset 5.*not the start"
    ):
        next(it)


def _corrupt(tmp_path, name, offset):
    path = tmp_path / name
    shutil.copy(DATA / name, path)
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))
    return path


def test_corrupted_data_names_file_and_record(tmp_path):
    # Record 2 of plain.tfrecord starts at byte 2 * (12 + 8 + 4) = 48; its data at 60.
    path = _corrupt(tmp_path, "plain.tfrecord", 60)
    it = iter(TFRecordIterDataset(path))
    assert [next(it), next(it)] == [b"record 0", b"record 1"]
    with pytest.raises(
        TFRecordCorruptionError,
        match=r"plain.tfrecord: record 2 \(at byte offset 48\) has corrupted data",
    ):
        next(it)
    assert list(TFRecordIterDataset(path, verify_crc=False))[2] != b"record 2"


def test_corrupted_length_and_truncation_are_reported(tmp_path):
    path = _corrupt(tmp_path, "plain.tfrecord", 24)  # record 1's length field
    with pytest.raises(TFRecordCorruptionError, match="record 1 .*corrupted length"):
        read_records(path)
    short = tmp_path / "short.tfrecord"
    short.write_bytes((DATA / "plain.tfrecord").read_bytes()[:-3])
    with pytest.raises(TFRecordCorruptionError, match="record 9 .*truncated"):
        read_records(short)
    header_only = tmp_path / "header.tfrecord"
    header_only.write_bytes((DATA / "plain.tfrecord").read_bytes()[:30])
    with pytest.raises(TFRecordCorruptionError, match="record 1 .*truncated"):
        read_records(header_only)


def test_gzip_file_gets_a_hint(tmp_path):
    import gzip

    path = tmp_path / "c.tfrecord.gz"
    path.write_bytes(gzip.compress((DATA / "plain.tfrecord").read_bytes()))
    with pytest.raises(TFRecordCorruptionError, match="GZIP"):
        read_records(path)


def test_bad_arguments_fail_early(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        TFRecordIterDataset(tmp_path / "missing.tfrecord")
    with pytest.raises(TypeError, match="one TFRecord file"):
        TFRecordIterDataset([str(DATA / "plain.tfrecord")])


def test_file_is_closed_after_the_end_and_on_close():
    it = iter(TFRecordIterDataset(DATA / "plain.tfrecord"))
    next(it)
    assert it._reader is not None
    it.close()
    assert it._reader is None
    assert next(it) == b"record 1"  # reopens at the saved position
    list(it)
    assert it._reader is None


def test_masked_crc_of_known_record():
    # The first 12 bytes of plain.tfrecord: length 8 and its masked CRC, as TensorFlow wrote them.
    raw = (DATA / "plain.tfrecord").read_bytes()
    assert int.from_bytes(raw[8:12], "little") == masked_crc32c(raw[:8])
