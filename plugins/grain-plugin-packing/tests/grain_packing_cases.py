"""Packing pipelines whose states are recorded from google grain 0.2.18 (see
``record_grain_packing_states.py``); written against the ``grain`` module given, so the same code
runs under google grain and under grain_core."""

from __future__ import annotations

import numpy as np

CASES = {
    "first_fit_3_bins": dict(packer="FirstFitPackIterDataset", num_packing_bins=3),
    "first_fit_2_bins_shuffled_seed_5": dict(
        packer="FirstFitPackIterDataset", num_packing_bins=2, shuffle_bins=True, seed=5
    ),
    "best_fit_4_bins_shuffled": dict(packer="BestFitPackIterDataset", num_packing_bins=4, shuffle_bins=True),
    "first_fit_after_map_and_filter": dict(
        packer="FirstFitPackIterDataset", num_packing_bins=3, map_filter=True, shuffle_bins=True, seed=2
    ),
}


def docs(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return [
        {
            "inputs": (np.arange(int(rng.integers(1, 12))) + 100 * i).astype(np.int64),
            "targets": (np.arange(int(rng.integers(1, 12))) + 100 * i).astype(np.int64),
        }
        for i in range(n)
    ]


def build(grain, case):
    spec = dict(CASES[case])
    packer = spec.pop("packer")
    ds = grain.MapDataset.source(docs()).to_iter_dataset()
    if spec.pop("map_filter", False):
        ds = ds.map(lambda d: {"inputs": d["inputs"], "targets": d["targets"][::-1]})
        ds = ds.filter(lambda d: d["inputs"][0] % 300 != 0)
    return getattr(grain.experimental, packer)(
        ds, length_struct={"inputs": 16, "targets": 16}, **spec
    )


def plain(row):
    return {k: np.asarray(v).tolist() for k, v in sorted(row.items())}
