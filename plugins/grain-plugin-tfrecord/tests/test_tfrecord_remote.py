"""TFRecordIterDataset over remote files: an HTTP range server and moto's S3 server on loopback, the
same records, CRC checks, errors and checkpoints as for local files."""

from __future__ import annotations

import pathlib

import pytest
from grain_plugin_tfrecord import TFRecordCorruptionError, TFRecordIterDataset, remote
from grain_plugin_tfrecord.format import read_records

from grain_core import testing
from grain_core.filesystems import RetryPolicy
from grain_core.state import StateMismatchError
from grain_core.testing.servers import RangeHTTPServer, S3Server

pytestmark = pytest.mark.timeout(120)
DATA = pathlib.Path(__file__).parent / "data"
NAMES = ["examples.tfrecord", "varied_sizes.tfrecord", "plain.tfrecord"]


@pytest.fixture
def http():
    with RangeHTTPServer(DATA) as server:
        yield server


@pytest.mark.parametrize("name", NAMES)
def test_http_files_read_like_local_ones(http, name):
    expected = read_records(DATA / name)
    ds = TFRecordIterDataset(f"{http.url}/{name}")
    assert list(ds) == expected


def test_small_blocks_cross_record_boundaries(http):
    name = "varied_sizes.tfrecord"
    fs, inner, size = remote.open_file(f"{http.url}/{name}")
    f = remote.RangeFile(fs, inner, size, block_size=7)
    assert f.read(size + 10) == (DATA / name).read_bytes()
    assert f.read(5) == b""


def test_checkpoints_and_restores_mid_file(http):
    ds = TFRecordIterDataset(f"{http.url}/varied_sizes.tfrecord")
    testing.assert_equal_output_after_checkpoint(ds)
    it = iter(ds)
    next(it), next(it)
    state = it.get_state()
    rest = list(it)
    again = iter(TFRecordIterDataset(f"{http.url}/varied_sizes.tfrecord"))
    again.set_state(state)
    assert list(again) == rest
    bad = dict(state, reader_offset=10**9)
    with pytest.raises(StateMismatchError, match="past the end"):
        iter(TFRecordIterDataset(f"{http.url}/varied_sizes.tfrecord")).set_state(bad)


def test_s3_storage_options_and_filesystem():
    expected = read_records(DATA / "examples.tfrecord")
    with S3Server() as s3:
        fs = s3.filesystem()
        fs.mkdir("tfr")
        fs.put(str(DATA / "examples.tfrecord"), "tfr/examples.tfrecord")
        by_url = TFRecordIterDataset(
            "s3://tfr/examples.tfrecord", storage_options=s3.storage_options
        )
        assert list(by_url) == expected
        assert list(TFRecordIterDataset("tfr/examples.tfrecord", filesystem=fs)) == expected


def test_missing_corrupt_and_failing_remote_files(http, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file.*nope.tfrecord"):
        list(TFRecordIterDataset(f"{http.url}/nope.tfrecord"))
    raw = bytearray((DATA / "examples.tfrecord").read_bytes())
    raw[20] ^= 0xFF
    with RangeHTTPServer({"bad.tfrecord": bytes(raw)}) as server:
        with pytest.raises(
            TFRecordCorruptionError, match=r"bad.tfrecord: record 0 \(at byte offset 0\)"
        ):
            list(TFRecordIterDataset(f"{server.url}/bad.tfrecord"))
        http.fail_next(2)  # transient: retried
        assert list(TFRecordIterDataset(f"{http.url}/plain.tfrecord")) == read_records(
            DATA / "plain.tfrecord"
        )
        fs, inner, size = remote.open_file(f"{server.url}/bad.tfrecord")
        f = remote.RangeFile(fs, inner, size, retry=RetryPolicy(attempts=2, initial_delay_s=0.001))
        server.fail_next(10**6)
        with pytest.raises(OSError, match="bad.tfrecord.*failed after 2 tries"):
            f.read(10)
        server.fail_next(0)
    with pytest.raises(ValueError, match="not both"):
        TFRecordIterDataset("s3://b/x", filesystem=object(), storage_options={})
