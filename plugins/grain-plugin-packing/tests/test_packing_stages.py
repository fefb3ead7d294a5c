"""The conformance kit's stage checks for the packing stages."""

import functools

import numpy as np

import grain_core as grain
from grain_core import testing


def _docs(n=30):
    rng = np.random.default_rng(0)
    return [
        {"inputs": np.arange(int(rng.integers(1, 12))) + 100 * i, "id": np.array([i])}
        for i in range(n)
    ]


def make_pack(name, bins=3):
    return getattr(grain.experimental, name)(
        grain.MapDataset.source(_docs()).to_iter_dataset(),
        length_struct={"inputs": 16, "id": 4},
        num_packing_bins=bins,
        meta_features=("id",),
        seed=5,
    )


def make_cts(target=10):
    return grain.experimental.ConcatThenSplitIterDataset(
        grain.MapDataset.source(_docs()).to_iter_dataset(),
        length_struct={"inputs": target, "id": 4},
        meta_features=("id",),
    )


def test_first_fit_conforms():
    testing.check_stage(
        functools.partial(make_pack, "FirstFitPackIterDataset"),
        foreign=functools.partial(make_pack, "FirstFitPackIterDataset", 4),
    )


def test_best_fit_conforms():
    testing.check_stage(
        functools.partial(make_pack, "BestFitPackIterDataset"),
        foreign=functools.partial(make_pack, "BestFitPackIterDataset", 4),
    )


def test_concat_then_split_conforms():
    testing.check_stage(make_cts, foreign=functools.partial(make_cts, 12))
