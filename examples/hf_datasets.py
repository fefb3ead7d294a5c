"""Hugging Face ``datasets`` with grain_core: a map-style dataset read in bulk through Arrow, and a
streaming dataset split by its shards, both checkpointed and resumed exactly. Offline: the data is
written to local Parquet files and loaded with ``load_dataset("parquet", data_files=...)``.

    python examples/hf_datasets.py [--small]
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # nothing is downloaded
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import grain_core as grain  # noqa: E402


def write_files(directory: str, files: int, rows: int) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for f in range(files):
        ids = np.arange(f * rows, (f + 1) * rows)
        table = pa.table(
            {
                "text": [f"document {i}" for i in ids],
                "tokens": [rng.integers(0, 1000, size=int(i % 12)).tolist() for i in ids],
                "label": ids,
            }
        )
        path = os.path.join(directory, f"part-{f:03d}.parquet")
        pq.write_table(table, path)
        paths.append(path)
    return paths


def map_style(paths: list[str], cache_dir: str) -> None:
    hf = datasets.load_dataset("parquet", data_files=paths, split="train", cache_dir=cache_dir)
    source = grain.sources.HuggingFaceDataSource(hf)
    ds = (
        grain.MapDataset.source(source)
        .shuffle(seed=0)
        .map(lambda row: {"length": np.int32(len(row["tokens"])), "label": row["label"]})
        .batch(8)
        .to_iter_dataset()
    )
    it = iter(ds)
    for _ in range(3):
        next(it)
    state = it.get_state()
    expected = [next(it)["label"] for _ in range(3)]
    again = iter(ds)
    again.set_state(state)
    got = [next(again)["label"] for _ in range(3)]
    assert all(np.array_equal(a, b) for a, b in zip(expected, got))
    print(f"map-style: {len(source)} rows, columns {source.column_names}; resumed identically")


def streaming(paths: list[str], cache_dir: str) -> None:
    stream = datasets.load_dataset(
        "parquet", data_files=paths, split="train", streaming=True, cache_dir=cache_dir
    )
    ds = grain.experimental.HuggingFaceIterDataset(stream.with_format("numpy"))
    options = grain.MultiprocessingOptions(num_workers=2)  # each worker reads its own files
    with iter(ds.mp_prefetch(options)) as it:
        head = [int(next(it)["label"]) for _ in range(10)]
        state = it.get_state()
    with iter(ds.mp_prefetch(options)) as it:
        it.set_state(state)
        rest = [int(r["label"]) for r in it]
    assert sorted(head + rest) == list(range(len(head) + len(rest)))
    print(f"streaming: {ds.num_shards} shards, {len(head) + len(rest)} rows; resumed identically")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    files, rows = (4, 50) if args.small else (16, 10_000)
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_files(tmp, files, rows)
        cache_dir = os.path.join(tmp, "hf-cache")
        map_style(paths, cache_dir)
        streaming(paths, cache_dir)


if __name__ == "__main__":
    main()
