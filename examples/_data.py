"""Small local data sets the examples generate in a temporary directory."""

from __future__ import annotations

import os

import numpy as np

FEATURES = 16


def encode(label: int, features: np.ndarray) -> bytes:
    """A record: a little-endian int32 label followed by float32 features."""
    return np.int32(label).tobytes() + features.astype("<f4").tobytes()


def decode(record: bytes) -> dict[str, np.ndarray]:
    """The inverse of :func:`encode`."""
    return {
        "label": np.frombuffer(record, "<i4", count=1)[0],
        "features": np.frombuffer(record, "<f4", offset=4),
    }


def write_arrayrecord(directory: str, num_files: int, records_per_file: int) -> list[str]:
    """Writes ``num_files`` ArrayRecord files of encoded records; returns their paths."""
    from array_record.python.array_record_module import ArrayRecordWriter

    rng = np.random.default_rng(0)
    paths = []
    for f in range(num_files):
        path = os.path.join(directory, f"train-{f:05d}-of-{num_files:05d}.array_record")
        writer = ArrayRecordWriter(path, "group_size:1")
        for i in range(records_per_file):
            label = f * records_per_file + i
            writer.write(encode(label, rng.standard_normal(FEATURES, dtype=np.float32)))
        writer.close()
        paths.append(path)
    return paths


def write_parquet(directory: str, num_files: int, rows_per_file: int) -> list[str]:
    """Writes Parquet files with an ``id`` and a ``text`` column; returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = []
    for f in range(num_files):
        ids = np.arange(f * rows_per_file, (f + 1) * rows_per_file, dtype=np.int64)
        table = pa.table({"id": ids, "text": [f"document {i}" for i in ids]})
        path = os.path.join(directory, f"part-{f:03d}.parquet")
        pq.write_table(table, path, row_group_size=max(1, rows_per_file // 4))
        paths.append(path)
    return paths
