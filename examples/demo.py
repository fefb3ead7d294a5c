"""The README's main job, on ArrayRecord data generated locally in a temporary directory:

source -> shuffle -> map(decode) -> batch -> to_iter_dataset -> mp_prefetch(2 workers); run some
steps, checkpoint, restore, and check the restored iterator continues with the same batches.

    python examples/demo.py [--small]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _data import decode, write_arrayrecord  # noqa: E402

import grain_core as grain  # noqa: E402


def build(paths: list[str], batch_size: int, workers: int) -> grain.IterDataset:
    return (
        grain.MapDataset.source(grain.sources.ArrayRecordDataSource(paths))
        .seed(42)
        .shuffle()
        .map(decode)
        .batch(batch_size, drop_remainder=True)
        .to_iter_dataset(grain.ReadOptions(num_threads=2))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="a quick run on little data")
    args = parser.parse_args()
    files, per_file, steps, batch = (2, 500, 10, 16) if args.small else (8, 20_000, 500, 64)

    with tempfile.TemporaryDirectory() as tmp:
        paths = write_arrayrecord(tmp, files, per_file)
        print(f"wrote {files * per_file:,} records in {files} ArrayRecord files under {tmp}")
        ds = build(paths, batch, workers=2)
        print(repr(ds))

        it = iter(ds)
        start = time.perf_counter()
        for _ in range(steps):
            b = next(it)
        elapsed = time.perf_counter() - start
        print(f"{steps} steps: {steps * batch / elapsed:,.0f} records/s "
              f"(batch {b['features'].shape}, {b['features'].dtype})")

        state_path = os.path.join(tmp, "iterator_state.json")
        with open(state_path, "w") as f:
            json.dump(it.get_state(), f)
        expected = [next(it) for _ in range(3)]
        it.close()
        print(f"checkpointed after {steps} steps ({os.path.getsize(state_path)} bytes of JSON)")

        restored = iter(build(paths, batch, workers=2))
        with open(state_path) as f:
            restored.set_state(json.load(f))
        for want in expected:
            got = next(restored)
            np.testing.assert_array_equal(got["label"], want["label"])
            np.testing.assert_array_equal(got["features"], want["features"])
        restored.close()
        print("restored: the next 3 batches are identical")


if __name__ == "__main__":
    main()
