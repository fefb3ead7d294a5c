"""Issue 5 workloads: FirstFit packing, window shuffles (an IterDataset's and a MapDataset's, read in
order and in a shuffled order) and interleave over Parquet files."""

from __future__ import annotations

import numpy as np
from harness import Workload, scratch_dir

_DOCS = 50_000


def _docs():
    rng = np.random.default_rng(0)
    lengths = rng.integers(16, 513, size=_DOCS)
    return [{"tokens": np.arange(n, dtype=np.int32)} for n in lengths.tolist()]


def _pack(lib, docs):
    return lib.experimental.FirstFitPackIterDataset(
        lib.MapDataset.source(docs).to_iter_dataset(),
        length_struct={"tokens": 2048},
        num_packing_bins=32,
        shuffle_bins=True,
        seed=0,
    )


def _window_shuffle(lib):
    return lib.experimental.WindowShuffleIterDataset(
        lib.MapDataset.range(200_000).to_iter_dataset(), window_size=1000, seed=0
    )


def _window_shuffle_map(lib):
    return lib.experimental.WindowShuffleMapDataset(
        lib.MapDataset.range(200_000), window_size=1000, seed=0
    ).to_iter_dataset()


def _window_shuffle_map_shuffled(lib):
    # A global shuffle downstream reads the windows in random order: every element is in a
    # different window from the one before.
    return (
        lib.experimental.WindowShuffleMapDataset(lib.MapDataset.range(20_000), window_size=1000, seed=0)
        .shuffle(seed=1)
        .to_iter_dataset()
    )


def _write_parquet():
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = scratch_dir("bench_transforms_")
    files = []
    for f in range(8):
        n = 25_000
        table = pa.table(
            {"id": np.arange(n, dtype=np.int64) + f * n, "x": np.random.default_rng(f).random(n)}
        )
        path = root / f"part-{f}.parquet"
        pq.write_table(table, path, row_group_size=1000)
        files.append(str(path))
    return files


def _row_group_iter_dataset(lib):
    """A small Parquet IterDataset over row groups, built on ``lib``'s public classes."""
    import pyarrow.parquet as pq

    class ParquetRows(lib.IterDataset):
        def __init__(self, path):
            super().__init__()
            self._path = path

        def __iter__(self):
            return _Iter(self._path)

    class _Iter(lib.DatasetIterator):
        def __init__(self, path):
            super().__init__()
            self._file = pq.ParquetFile(path)
            self._group, self._rows, self._pos = 0, [], 0

        def __next__(self):
            while self._pos >= len(self._rows):
                if self._group >= self._file.num_row_groups:
                    raise StopIteration
                self._rows = self._file.read_row_group(self._group).to_pylist()
                self._group += 1
                self._pos = 0
            self._pos += 1
            return self._rows[self._pos - 1]

        def get_state(self):
            return {
                "kind": "ParquetRows",
                "group": self._group - (1 if self._rows else 0),
                "pos": self._pos,
            }

        def set_state(self, state):
            self._group, self._rows, self._pos = state["group"], [], 0
            if state["pos"]:
                self._rows = self._file.read_row_group(self._group).to_pylist()
                self._group += 1
                self._pos = state["pos"]

    return ParquetRows


def _interleave_ours(lib, files):
    factory = _row_group_iter_dataset(lib)
    return lib.experimental.InterleaveIterDataset(
        lib.MapDataset.source(files).map(factory), cycle_length=4
    )


def _interleave_theirs(lib, files):
    return lib.experimental.InterleaveIterDataset(
        lib.MapDataset.source(files).map(lib.experimental.ParquetIterDataset), cycle_length=4
    )


WORKLOADS = [
    Workload(
        "FirstFitPack 50k docs (16-512 tok) into 2048 x 32 bins",
        _pack,
        setup=_docs,
        count=lambda row: int((row["tokens_segment_ids"] > 0).sum()),
        unit="tokens",
        target=5,
    ),
    Workload(
        "WindowShuffleIterDataset(window=1000) over range(200k)",
        _window_shuffle,
        target=5,
    ),
    Workload(
        "WindowShuffleMapDataset(window=1000) over range(200k), to_iter",
        _window_shuffle_map,
        target=5,
    ),
    Workload(
        "WindowShuffleMapDataset(window=1000) over range(20k), then shuffle",
        _window_shuffle_map_shuffled,
        target=5,
    ),
    Workload(
        "Interleave 8 Parquet files (25k rows each), cycle_length=4",
        _interleave_ours,
        build_theirs=_interleave_theirs,
        setup=_write_parquet,
        unit="rows",
        target=5,
    ),
]
