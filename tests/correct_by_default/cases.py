"""Cases where Grain 0.2.18 loses or repeats records, and their neighbours where it does not.

Each case is ``(name, function of the grain module)`` returning a JSON-able result; the same
functions run under google grain (``record_grain.py`` writes ``grain_outputs.json``) and under
grain_core (``tests/test_correct_by_default.py``). Long outputs are summarised by
:func:`summary` (a digest, the distinct count and the first elements), so the file stays small.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np


def summary(values: Any) -> dict[str, Any]:
    arr = np.asarray([int(v) for v in values], dtype=np.int64)
    return {
        "sha256": hashlib.sha256(arr.tobytes()).hexdigest(),
        "len": int(arr.size),
        "distinct": int(np.unique(arr).size),
        "head": arr[:16].tolist(),
    }


#: Shuffle sizes around powers of two: 2**k + 1 with k >= 16 even is where Grain's block is short.
SHUFFLE_SIZES = [1, 2, 3, 15, 16, 17, 255, 256, 257, 65535, 65536, 65537, 131073, 262143, 262144, 262145]
SHUFFLE_SEEDS = [0, 7]
#: (length, window size): partial last windows and whole ones.
WINDOWS = [(10, 4), (20, 6), (64, 8), (65, 8), (100, 7), (1000, 128), (1024, 128)]
#: (records, shard count, epochs, shuffle): uneven shards and even ones.
SHARDS = [(10, 3, 1, False), (10, 3, 2, False), (11, 2, 2, True), (7, 4, 1, False), (12, 3, 2, True), (9, 2, 3, True)]
#: (length, slice, epochs): shuffle -> slice -> repeat (Grain issue 1200), and a whole slice.
SLICES = [(10, (0, 4, 1), 3), (17, (3, 15, 2), 2), (12, (None, None, -1), 2), (20, (5, None, 1), 3)]


def elements(ds) -> list[int]:
    """Every element of a ``MapDataset`` by index (much faster in Grain than iterating)."""
    return [int(ds[i]) for i in range(len(ds))]


def shuffle_case(n: int, seed: int):
    return lambda grain: summary(elements(grain.MapDataset.range(n).shuffle(seed=seed)))


def window_case(n: int, w: int):
    def run(grain):
        ws = grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(n), window_size=w, seed=3)
        return elements(ws.repeat(2))

    return run


def shard_case(n: int, count: int, epochs: int, shuffle: bool):
    def run(grain):
        out = []
        for k in range(count):
            sampler = grain.samplers.IndexSampler(
                n, grain.sharding.ShardOptions(k, count), shuffle=shuffle, num_epochs=epochs, seed=5
            )
            loader = grain.DataLoader(data_source=list(range(n)), sampler=sampler, worker_count=0)
            out.append([int(x) for x in loader])
        return out

    return run


def slice_case(n: int, sl: tuple, epochs: int):
    def run(grain):
        ds = grain.MapDataset.range(n).shuffle(seed=42)[slice(*sl)]
        return elements(ds.repeat(epochs))

    return run


CASES: dict[str, Any] = {}
for _n in SHUFFLE_SIZES:
    for _s in SHUFFLE_SEEDS:
        CASES[f"shuffle-{_n}-seed{_s}"] = shuffle_case(_n, _s)
for _n, _w in WINDOWS:
    CASES[f"window-{_n}-{_w}"] = window_case(_n, _w)
for _args in SHARDS:
    CASES["shard-{}-{}-{}-{}".format(*_args)] = shard_case(*_args)
for _n, _sl, _e in SLICES:
    CASES[f"slice-{_n}-{_sl}-{_e}"] = slice_case(_n, _sl, _e)
