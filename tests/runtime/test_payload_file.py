"""A large pipeline (a source held in memory) reaches the workers through one anonymous memory file
(``process_worker.PayloadFile``), not through each worker's start pipe; small ones use the pipe;
without memfd it falls back to the pipe; no process keeps the file open once the workers run."""

from __future__ import annotations

import os

import pytest

import grain_core as grain
from grain_core.runtime.process_worker import PayloadFile
from grain_core.runtime.processes import ProcessRuntime

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not PayloadFile.AVAILABLE, reason="no memfd on this platform (pipe only)"),
]

_FILE_NAME = "memfd:grain_core-job"


def _open_payload_files() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += _FILE_NAME in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return count


def _tag(record: bytes) -> tuple[int, int]:
    """(the record's number, payload files open in the worker that read it)."""
    return int.from_bytes(record[:4], "little"), _open_payload_files()


def _records(n: int, size: int) -> list[bytes]:
    return [i.to_bytes(4, "little") + bytes([i % 251]) * (size - 4) for i in range(n)]


@pytest.fixture
def creates(monkeypatch):
    calls = []
    original = PayloadFile.create.__func__

    def create(cls, payload):
        calls.append(len(payload))
        return original(cls, payload)

    monkeypatch.setattr(PayloadFile, "create", classmethod(create))
    return calls


def _run(source, method):
    ds = grain.MapDataset.source(source).map(_tag).to_iter_dataset()
    ds = ds.mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2), runtime=ProcessRuntime(start_method=method)
    )
    with iter(ds) as it:
        first = next(it)
        in_consumer = _open_payload_files()
        rest = list(it)
    return [first, *rest], in_consumer


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_large_pipeline_travels_in_a_memory_file(creates, method):
    source = _records(600, 4096)  # 2.4 MiB of records in the pipeline's pickle
    out, in_consumer = _run(source, method)
    assert [i for i, _ in out] == list(range(600))
    assert len(creates) == 1 and creates[0] >= PayloadFile.MIN_BYTES  # written once, not per worker
    assert in_consumer == 0  # the consumer closed its descriptor once the workers started
    assert {files for _, files in out} == {0}  # each worker closed its own after unpickling


def test_small_pipeline_goes_through_the_pipe(creates):
    out, _ = _run(_records(50, 64), "forkserver")
    assert [i for i, _ in out] == list(range(50))
    assert creates == []


def test_without_memfd_the_pipe_carries_it(monkeypatch):
    def refuse(cls, payload):
        raise OSError(38, "memfd_create refused")

    monkeypatch.setattr(PayloadFile, "create", classmethod(refuse))
    out, _ = _run(_records(600, 4096), "forkserver")
    assert [i for i, _ in out] == list(range(600))


def test_the_pool_leaves_no_descriptor_behind():
    before = sorted(os.listdir("/proc/self/fd"))
    _run(_records(600, 4096), "forkserver")
    after = sorted(os.listdir("/proc/self/fd"))
    assert _open_payload_files() == 0
    assert len(after) <= len(before), (before, after)
