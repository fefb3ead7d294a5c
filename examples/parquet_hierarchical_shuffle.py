"""Hierarchical shuffling of Parquet files: shuffle the file order, read several files at once with
``InterleaveIterDataset``, then shuffle rows inside a sliding window with ``WindowShuffleIterDataset``.

    python examples/parquet_hierarchical_shuffle.py [--small]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _data import write_parquet  # noqa: E402

import grain_core as grain  # noqa: E402


def make_dataset(paths, seed=0, cycle_length=3, window=64):
    files = grain.MapDataset.source(paths).seed(seed).shuffle()       # level 1: file order
    per_file = files.map(grain.experimental.ParquetIterDataset)       # one stream per file
    rows = grain.experimental.InterleaveIterDataset(per_file, cycle_length=cycle_length)  # level 2
    return grain.experimental.WindowShuffleIterDataset(rows, window_size=window, seed=seed)  # level 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    files, rows = (4, 50) if args.small else (32, 5_000)
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_parquet(tmp, files, rows)
        ds = make_dataset(paths)
        it = iter(ds)
        first = [next(it) for _ in range(10)]
        print("first ids:", [int(r["id"]) for r in first])
        state = it.get_state()
        rest = [int(r["id"]) for r in it]
        ids = [int(r["id"]) for r in first] + rest
        assert sorted(ids) == list(range(files * rows)), "every row exactly once"
        it2 = iter(make_dataset(paths))
        it2.set_state(state)
        assert [int(r["id"]) for r in it2] == rest, "resumes exactly"
        print(f"read {len(ids):,} rows from {files} files, each once, in a shuffled order; "
              "resumed from a checkpoint identically")


if __name__ == "__main__":
    main()
