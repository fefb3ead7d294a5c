"""``mp_prefetch(..., sequential_slice=True)``: Grain's element order and exact states.

The expected orders and Grain's states come from google grain 0.2.18 (``data/grain_0_2_18_states.json``,
recorded by ``record_grain.py``; ``cases.SEQUENTIAL_SLICE`` holds the pipelines).
"""

from __future__ import annotations

import collections
import json
import pathlib

import numpy as np
import pytest

import grain_core as grain
import grain_core.python as gp
from grain_core.dataset.sequential import contiguous_share, even_split
from grain_core.state import StateMismatchError

from . import cases

RECORDED = {
    r["name"]: r
    for r in json.loads(
        (pathlib.Path(__file__).parent / "data" / "grain_0_2_18_states.json").read_text()
    )["sequential_slice"]
}
CASES = {case.name: case for case in cases.SEQUENTIAL_SLICE}
#: Grain's RepeatMapDataset keeps the length it had before the source was sliced, so each worker
#: reads its block's epochs twice as often (24 elements from ``range(6).repeat(2)``); grain_core
#: rebuilds the stages over the block (12 elements). See docs/differences.md.
DIFFERENT = {"seq_repeat_shuffle_2_workers"}
SAME = sorted(set(RECORDED) - DIFFERENT)


def _iter(name: str):
    return iter(cases.build(CASES[name], grain, gp, np))


@pytest.mark.parametrize("name", SAME)
def test_element_order_is_grains(name):
    it = _iter(name)
    try:
        assert cases.rest(it) == RECORDED[name]["before"] + RECORDED[name]["after"]
    finally:
        it.close()


@pytest.mark.parametrize("name", SAME)
def test_grain_state_restores(name):
    it = _iter(name)
    try:
        it.set_state(RECORDED[name]["state"])
        assert cases.rest(it) == RECORDED[name]["after"]
    finally:
        it.close()


def test_own_state_restores_exactly():
    name = "seq_shuffle_3_workers"
    it = _iter(name)
    try:
        cases.take(it, 5)
        state = it.get_state()
        expected = cases.rest(it)
    finally:
        it.close()
    it = _iter(name)
    try:
        it.set_state(state)
        assert cases.rest(it) == expected
    finally:
        it.close()


def test_repeat_is_rebuilt_over_each_workers_block():
    it = _iter("seq_repeat_shuffle_2_workers")
    try:
        out = cases.rest(it)
    finally:
        it.close()
    assert collections.Counter(out) == {i: 2 for i in range(6)}
    # Worker 0 reads the block [0, 3) and worker 1 the block [3, 6), round-robin.
    assert set(out[0::2]) == {0, 1, 2} and set(out[1::2]) == {3, 4, 5}


def _seq(num_workers: int, sequential: bool = True):
    return (
        grain.MapDataset.range(10)
        .shuffle(seed=1)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers), sequential_slice=sequential)
    )


def test_state_of_another_worker_count_is_refused_unchanged():
    it = iter(_seq(2))
    try:
        cases.take(it, 3)
        state = it.get_state()
    finally:
        it.close()
    it = iter(_seq(3))
    try:
        before = it.get_state()
        with pytest.raises(StateMismatchError, match="sequential_slice"):
            it.set_state(state)
        assert it.get_state() == before
        assert cases.rest(it) == RECORDED["seq_shuffle_3_workers"]["before"] + RECORDED[
            "seq_shuffle_3_workers"
        ]["after"]
    finally:
        it.close()


@pytest.mark.parametrize("saved_sequential", [True, False])
def test_state_of_the_other_slicing_is_refused_unchanged(saved_sequential):
    it = iter(_seq(2, saved_sequential))
    try:
        cases.take(it, 3)
        state = it.get_state()
    finally:
        it.close()
    it = iter(_seq(2, not saved_sequential))
    try:
        before = it.get_state()
        with pytest.raises(StateMismatchError):
            it.set_state(state)
        assert it.get_state() == before
    finally:
        it.close()


def test_even_split_matches_grains_blocks():
    assert [even_split(10, i, 3) for i in range(3)] == [(0, 4), (4, 7), (7, 10)]
    assert [even_split(2, i, 4) for i in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]
    with pytest.raises(ValueError):
        even_split(5, 2, 2)


def test_contiguous_share_keeps_derived_seeds():
    ds = grain.MapDataset.range(9).seed(7).shuffle().random_map(lambda x, rng: (x, int(rng.integers(100))))
    share = contiguous_share(ds, 1, 3)
    # The block [3, 6) shuffled with the seed derived for the whole pipeline.
    assert sorted(x for x, _ in share) == [3, 4, 5]
    assert list(share) == list(contiguous_share(ds, 1, 3))
    whole = grain.MapDataset.range(3, 6).seed(7).shuffle().random_map(
        lambda x, rng: (x, int(rng.integers(100)))
    )
    assert [x for x, _ in share] == [x for x, _ in whole]


def test_more_workers_than_elements_gives_every_element_once():
    ds = grain.MapDataset.source(list("abc")).to_iter_dataset().mp_prefetch(
        grain.MultiprocessingOptions(num_workers=4), sequential_slice=True
    )
    it = iter(ds)
    try:
        assert cases.rest(it) == ["a", "b", "c"]
    finally:
        it.close()
