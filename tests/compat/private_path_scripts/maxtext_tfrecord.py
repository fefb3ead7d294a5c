"""MaxText's TFRecord input shapes, written as a Grain user writes them (``import grain``).

Mimics ``maxtext/input_pipeline/input_pipeline_utils.py`` (our own code, same call shapes): a
reader subclass of Grain's private ``_TFRecordReader`` that skips ``__init__`` and sets
``self._reader`` to a binary file object that is not a local file; an iterator subclass of
``_TFRecordDatasetIterator`` that calls ``grain.DatasetIterator.__init__(self)`` and sets
``self._reader``; a ``TFRecordIterDataset`` subclass whose ``__iter__`` reads ``self._path``; and
an index-sharding ``IterDataset``/``DatasetIterator`` pair reading ``self._parent``. Run with google
grain (the recorder) or through ``python -m grain_core.compat run``; prints one JSON object.

Usage: python maxtext_tfrecord.py DIRECTORY
"""

import io
import json
import struct
import sys
from pathlib import Path

import grain.python as grain
import numpy as np
from grain._src.python.dataset.sources.tfrecord_dataset import (  # pylint: disable=protected-access
    _TFRecordDatasetIterator,
    _TFRecordReader,
)
from grain.experimental import TFRecordIterDataset


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    c = _crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecord(path: Path, records: list[bytes]) -> None:
    with open(path, "wb") as f:
        for rec in records:
            length = struct.pack("<Q", len(rec))
            f.write(length + struct.pack("<I", _masked(length)) + rec + struct.pack("<I", _masked(rec)))


MEM = "mem://"


class _InMemoryTFRecordReader(_TFRecordReader):
    """Like MaxText's GCS reader: skips the parent __init__ and sets its own binary reader."""

    def __init__(self, path: str):
        self._reader = io.BytesIO(Path(path[len(MEM):]).read_bytes())


class _InMemoryTFRecordDatasetIterator(_TFRecordDatasetIterator):
    def __init__(self, path: str):
        grain.DatasetIterator.__init__(self)
        self._reader = _InMemoryTFRecordReader(path)


class InMemoryTFRecordIterDataset(TFRecordIterDataset):
    def __iter__(self) -> grain.DatasetIterator:
        return _InMemoryTFRecordDatasetIterator(self._path)


def make_tfrecord_iter_dataset(path: str):
    if path.startswith(MEM):
        return InMemoryTFRecordIterDataset(path)
    return TFRecordIterDataset(path)


class _IndexShardDatasetIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator, host_index: int, host_count: int):
        super().__init__(parent)
        self._host_index = host_index
        self._host_count = host_count
        self._next_index = 0

    def __next__(self):
        while True:
            value = next(self._parent)
            current = self._next_index
            self._next_index += 1
            if current % self._host_count == self._host_index:
                return value

    def get_state(self):
        return {"next_index": self._next_index, "parent": self._parent.get_state()}

    def set_state(self, state):
        self._next_index = state["next_index"]
        self._parent.set_state(state["parent"])


class IndexShardIterDataset(grain.IterDataset):
    def __init__(self, parent: grain.IterDataset, host_index: int, host_count: int):
        super().__init__(parent)
        self._host_index = host_index
        self._host_count = host_count

    def __iter__(self):
        return _IndexShardDatasetIterator(
            self._parent.__iter__(), host_index=self._host_index, host_count=self._host_count
        )


def parse(record: bytes) -> dict:
    tokens = np.frombuffer(record, dtype=np.int32)
    return {"inputs": tokens, "targets": tokens + 1}


def plain(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in sorted(x.items())}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, bytes):
        return x.hex()
    return x


def main(directory: str) -> dict:
    root = Path(directory)
    files = []
    for f in range(3):
        path = root / f"data-{f}.tfrecord"
        write_tfrecord(path, [np.full(4, 10 * f + r, np.int32).tobytes() for r in range(5)])
        files.append(str(path))
    out: dict = {}

    # The private iterator directly: records, Grain's state, restore.
    it = _TFRecordDatasetIterator(files[0])
    first = [next(it) for _ in range(2)]
    state = it.get_state()
    rest = list(it)
    it2 = _TFRecordDatasetIterator(files[0])
    it2.set_state(state)
    out["private_iterator"] = {
        "first": plain(first), "state": state, "rest": plain(rest), "restored": plain(list(it2))
    }

    # The subclass chain on a path that is not a local file.
    mem = InMemoryTFRecordIterDataset(MEM + files[1])
    mit = iter(mem)
    head = [next(mit) for _ in range(3)]
    mstate = mit.get_state()
    mit2 = iter(mem)
    mit2.set_state(mstate)
    out["subclass"] = {
        "path": mem._path == MEM + files[1],
        "head": plain(head),
        "state": mstate,
        "restored": plain(list(mit2)),
        "all": plain(list(mem)),
    }

    # A MaxText-like pipeline: files -> one dataset per file (local and not) -> interleave ->
    # host sharding by index -> parse -> batch; a checkpoint in the middle.
    paths = [files[0], MEM + files[1], files[2]]
    ds = grain.MapDataset.source(paths).map(make_tfrecord_iter_dataset)
    ds = grain.experimental.InterleaveIterDataset(ds, cycle_length=2)
    ds = IndexShardIterDataset(ds, host_index=1, host_count=2)
    ds = ds.map(parse).batch(2)
    pit = iter(ds)
    before = [next(pit) for _ in range(2)]
    pstate = pit.get_state()
    after = list(pit)
    pit2 = iter(ds)
    pit2.set_state(pstate)
    out["pipeline"] = {
        "before": plain(before),
        "after": plain(after),
        "restored": plain(list(pit2)),
    }
    shard_it = iter(IndexShardIterDataset(grain.MapDataset.range(7).to_iter_dataset(), 0, 3))
    out["index_shard"] = {"first": next(shard_it), "next_index": shard_it.get_state()["next_index"]}
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1]), sort_keys=True))
