"""Issue 7 workloads: the DataLoader over ArrayRecord files (Map decode + Batch), 0 and 2 workers.

Both libraries read the same files: 50k records of 1 KiB in 4 files, written once with
array_record's ``ArrayRecordWriter``. grain_core reads them with ``grain_core.ArrayRecordDataSource``
(the arrayrecord plugin), grain with ``grain.sources.ArrayRecordDataSource``.
"""

from __future__ import annotations

import os

import numpy as np
from harness import Workload, scratch_dir

NUM_RECORDS = 50_000
RECORD_BYTES = 1024
NUM_FILES = 4
BATCH = 128

_DATA: list[str] | None = None


def _write_files() -> list[str]:
    global _DATA
    if _DATA is not None:
        return _DATA
    from array_record.python.array_record_module import ArrayRecordWriter

    directory = str(scratch_dir("bench_dataloader_"))
    rng = np.random.default_rng(0)
    paths = []
    per_file = NUM_RECORDS // NUM_FILES
    for f in range(NUM_FILES):
        path = os.path.join(directory, f"data-{f:05d}-of-{NUM_FILES:05d}.array_record")
        writer = ArrayRecordWriter(path, "group_size:1")
        for _ in range(per_file):
            writer.write(rng.integers(0, 256, RECORD_BYTES, dtype=np.uint8).tobytes())
        writer.close()
        paths.append(path)
    _DATA = paths
    return paths


def _make_decode(lib):
    """The library's decode class, each from a module that imports only that library (worker
    processes import it to unpickle the operation)."""
    if lib.__name__.partition(".")[0] == "grain_core":
        from dataloader_decode import Decode
    else:
        from dataloader_decode_grain import Decode
    return Decode


def _batch(lib):
    return lib.transforms.Batch if lib.__name__ == "grain_core" else lib.Batch


def _source(lib, paths):
    return lib.ArrayRecordDataSource(paths)


def _loader(lib, paths, workers, shuffle):
    if lib.__name__ != "grain_core":
        import grain.python as lib  # grain 0.2 keeps the DataLoader API under grain.python
        from absl import flags

        if not flags.FLAGS.is_parsed():  # grain's workers read absl flags
            flags.FLAGS.mark_as_parsed()
    source = _source(lib, paths)
    sampler = lib.IndexSampler(
        num_records=len(source),
        shard_options=lib.NoSharding(),
        shuffle=shuffle,
        num_epochs=1,
        seed=0,
    )
    return lib.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[_make_decode(lib)(), _batch(lib)(batch_size=BATCH, drop_remainder=True)],
        worker_count=workers,
    )


def _ref_reader(paths):
    from array_record.python.array_record_module import ArrayRecordReader

    n = 0
    for p in paths:
        r = ArrayRecordReader(p, "readahead_buffer_size:0")
        count = r.num_records()
        n += len(r.read(list(range(count))))
        r.close()
    return n


WORKLOADS = [
    Workload(
        f"DataLoader ArrayRecord 50kx1KiB shuffle decode+batch({BATCH}) workers={w}",
        lambda lib, paths, w=w: _loader(lib, paths, w, shuffle=True),
        count=len,
        unit="records",
        target=5,
        setup=_write_files,
        references={"ArrayRecordReader.read(all)": _ref_reader} if w == 0 else {},
        max_seconds=30.0,
    )
    for w in (0, 2)
]
