"""Language-model packing: variable-length token sequences packed into fixed-length rows with
``FirstFitPackIterDataset``, then batched.

    python examples/lm_packing.py [--small]
"""

from __future__ import annotations

import argparse

import numpy as np

import grain_core as grain


def tokens(index: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(index)
    n = int(rng.integers(4, 60))
    ids = rng.integers(1, 32_000, size=n, dtype=np.int32)
    return {"inputs": ids, "targets": np.roll(ids, -1)}


def make_dataset(num_docs, seq_len, batch_size):
    docs = grain.MapDataset.range(num_docs).seed(0).shuffle().map(tokens).to_iter_dataset()
    packed = grain.experimental.FirstFitPackIterDataset(
        docs, length_struct={"inputs": seq_len, "targets": seq_len}, num_packing_bins=8
    )
    return packed.batch(batch_size, drop_remainder=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    num_docs, seq_len, batch = (200, 128, 4) if args.small else (20_000, 1024, 16)
    ds = make_dataset(num_docs, seq_len, batch)
    batches = list(ds)
    b = batches[0]
    print("keys:", sorted(b))
    for k in sorted(b):
        print(f"  {k}: shape={b[k].shape} dtype={b[k].dtype}")
    assert b["inputs"].shape == (batch, seq_len)
    fill = np.mean([np.count_nonzero(x["inputs"]) / x["inputs"].size for x in batches])
    print(f"{len(batches)} batches of {batch}x{seq_len} tokens; {fill:.1%} of positions are tokens")


if __name__ == "__main__":
    main()
