"""Windows of 256 to 16,384 elements, whose orders the iterator computes many at a time
(``grain_core.shuffle_cipher.shuffle_tables``), give Grain's order, recorded from google grain 0.2.18 in
``data/grain_window_orders.json``; a restore in the middle continues it exactly."""

from __future__ import annotations

import json
import pathlib

import pytest

import grain_core as grain

CASES = json.loads(
    (pathlib.Path(__file__).parent / "data" / "grain_window_orders.json").read_text()
)["cases"]


def _ds(case):
    return grain.experimental.WindowShuffleIterDataset(
        grain.MapDataset.range(case["n"]).to_iter_dataset(
            grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
        ),
        window_size=case["window_size"],
        seed=case["seed"],
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"n{c['n']}-w{c['window_size']}")
def test_grain_order_for_large_windows(case):
    assert list(_ds(case)) == case["elements"]


@pytest.mark.parametrize("case", CASES[:2], ids=lambda c: f"n{c['n']}-w{c['window_size']}")
@pytest.mark.parametrize("at", [1, 999, 1000, 2100])
def test_restore_inside_a_batch_of_window_orders(case, at):
    at = min(at, case["n"] - 1)
    it = iter(_ds(case))
    for _ in range(at):
        next(it)
    state = it.get_state()
    fresh = iter(_ds(case))
    fresh.set_state(state)
    assert list(fresh) == case["elements"][at:]
