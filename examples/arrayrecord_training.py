"""A training-style loop over ArrayRecord with ``mp_prefetch``, saving the data iterator in the same
Orbax checkpoint as the (toy) model state, then resuming from it.

    python examples/arrayrecord_training.py [--small]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _data import FEATURES, decode, write_arrayrecord  # noqa: E402

import grain_core as grain  # noqa: E402


def make_dataset(paths, batch_size):
    return (
        grain.MapDataset.source(grain.sources.ArrayRecordDataSource(paths))
        .seed(0)
        .shuffle()
        .map(decode)
        .batch(batch_size, drop_remainder=True)
        .repeat()
        .to_iter_dataset(grain.ReadOptions(num_threads=2))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )


def train(it, weights, steps):
    seen = []
    for _ in range(steps):
        batch = next(it)
        weights = weights + 0.01 * batch["features"].mean(axis=0)  # a stand-in for an update
        seen.append(batch["label"].copy())
    return weights, seen


def main() -> None:
    import orbax.checkpoint as ocp

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    files, per_file, steps, batch = (2, 300, 6, 8) if args.small else (8, 10_000, 300, 64)

    with tempfile.TemporaryDirectory() as tmp:
        paths = write_arrayrecord(tmp, files, per_file)
        ckpt_dir = os.path.join(tmp, "ckpt")
        weights = np.zeros(FEATURES, np.float32)

        it = iter(make_dataset(paths, batch))
        weights, _ = train(it, weights, steps)
        with ocp.CheckpointManager(ckpt_dir, item_names=("model", "data")) as mngr:
            mngr.save(
                steps,
                args=ocp.args.Composite(
                    model=ocp.args.StandardSave({"w": weights}),
                    data=grain.checkpoint.CheckpointSave(it),
                ),
            )
            mngr.wait_until_finished()
        _, expected = train(it, weights, steps)
        it.close()
        print(f"trained {steps} steps and saved step {steps} to {ckpt_dir}")

        it = iter(make_dataset(paths, batch))
        with ocp.CheckpointManager(ckpt_dir, item_names=("model", "data")) as mngr:
            restored = mngr.restore(
                mngr.latest_step(),
                args=ocp.args.Composite(
                    model=ocp.args.StandardRestore({"w": weights}),
                    data=grain.checkpoint.CheckpointRestore(it),
                ),
            )
        np.testing.assert_array_equal(restored["model"]["w"], weights)
        _, resumed = train(it, restored["model"]["w"], steps)
        it.close()
        for a, b in zip(expected, resumed):
            np.testing.assert_array_equal(a, b)
        print(f"resumed from step {steps}: the next {steps} batches are identical")


if __name__ == "__main__":
    main()
