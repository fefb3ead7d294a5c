"""Pipelines shared by the tests (importable by the Ray actors through the consumer's sys.path)."""

from __future__ import annotations

import numpy as np

import grain_core as grain

N = 31


def pipeline(n: int = N, seed: int = 5) -> grain.IterDataset:
    """Seeded shuffle, a numpy leaf, per-element randomness and a thread prefetch: every kind of
    state mp_prefetch has to carry exactly."""
    ds = (
        grain.MapDataset.range(n)
        .seed(seed)
        .shuffle()
        .map(lambda x: {"x": int(x), "v": np.arange(3) * int(x)})
        .to_iter_dataset(grain.ReadOptions(num_threads=1))
        .random_map(lambda e, r: {**e, "r": int(r.integers(1 << 30))})
    )
    return grain.experimental.ThreadPrefetchIterDataset(ds, 2)


def held_back_pipeline(n: int = 61) -> grain.IterDataset:
    """:func:`pipeline` with a 1 MiB leaf on every element. Under ``RayRuntime(ahead_bytes=
    AHEAD_BYTES)`` an actor then holds at most its buffer plus about one element ahead of
    ``next()``, so an actor killed in the middle of its share always still owes elements: its death
    is seen, whatever the timing (with small elements it may have handed over its whole share)."""
    return pipeline(n).map(lambda e: {**e, "pad": np.zeros(1 << 17)})
