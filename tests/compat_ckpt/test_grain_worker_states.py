"""States saved by google grain 0.2.18 with worker processes restore into grain_core at the same position.

``data/grain_0_2_18_states.json`` was recorded from google grain 0.2.18 by ``record_grain.py``
(``cases.py`` holds the pipelines): for each pipeline, the state Grain's iterator returned after a
few elements and every element Grain yielded after it. Each test builds the same pipeline with
grain_core, restores Grain's state and compares what follows. Grain is not needed.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import grain_core as grain
import grain_core.python as gp
from grain_core.state import StateMismatchError

from . import cases

RECORDED = json.loads(
    (pathlib.Path(__file__).parent / "data" / "grain_0_2_18_states.json").read_text()
)
CASES = {case.name: case for group in cases.ALL.values() for case in group}


def _recorded(group: str) -> list[dict]:
    return RECORDED[group]


def _restore_and_compare(record: dict, as_bytes: bool) -> None:
    case = CASES[record["name"]]
    it = iter(cases.build(case, grain, gp, np))
    try:
        state = record["state"]
        it.set_state(json.dumps(state).encode() if as_bytes else state)
        assert cases.rest(it) == record["after"]
    finally:
        it.close()


@pytest.mark.parametrize("record", _recorded("dataloader_workers"), ids=lambda r: r["name"])
def test_grain_dataloader_state_with_workers_restores(record):
    _restore_and_compare(record, as_bytes=True)


def test_fresh_dataloader_with_workers_yields_grains_elements():
    record = next(r for r in _recorded("dataloader_workers") if r["name"] == "first_step_2_workers")
    loader = cases.build(CASES[record["name"]], grain, gp, np)
    it = iter(loader)
    try:
        assert cases.rest(it) == record["after"]
    finally:
        it.close()


def test_grain_dataloader_state_of_another_worker_count_is_refused_unchanged():
    record = _recorded("dataloader_workers")[0]
    state = dict(record["state"], worker_count=3)
    it = iter(cases.build(CASES[record["name"]], grain, gp, np))
    try:
        first = cases.take(it, 1)
        before = it.get_state()
        with pytest.raises(StateMismatchError, match="worker count in checkpoint: 3"):
            it.set_state(json.dumps(state).encode())
        assert it.get_state() == before
        assert first + cases.take(it, 2) == record["before"][:1] + record["before"][1:3]
    finally:
        it.close()


@pytest.mark.parametrize("record", _recorded("mp_prefetch"), ids=lambda r: r["name"])
def test_grain_mp_prefetch_state_restores(record):
    _restore_and_compare(record, as_bytes=False)


def test_grain_mp_prefetch_state_of_another_worker_count_is_refused():
    record = next(r for r in _recorded("mp_prefetch") if r["name"] == "map_2_workers")
    ds = (
        grain.MapDataset.range(10)
        .map(lambda x: x * 10)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=3))
    )
    it = iter(ds)
    try:
        before = it.get_state()
        with pytest.raises(StateMismatchError, match="num_workers=2.*num_workers=3.*num_workers=2"):
            it.set_state(record["state"])
        assert it.get_state() == before
        assert cases.rest(it) == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    finally:
        it.close()


def test_grain_mp_prefetch_state_of_another_pipeline_is_refused():
    record = next(r for r in _recorded("mp_prefetch") if r["name"] == "map_2_workers")
    state = json.loads(json.dumps(record["state"]))
    state["iterators_in_use_states"][0] = {"parents": [], "index": 0}
    ds = grain.MapDataset.range(10).to_iter_dataset().mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2)
    )
    it = iter(ds)
    try:
        before = it.get_state()
        with pytest.raises(StateMismatchError):
            it.set_state(state)
        assert it.get_state() == before
    finally:
        it.close()


@pytest.mark.parametrize("num_workers", [0, None])
def test_grain_mp_prefetch_state_into_an_in_process_pipeline_is_refused(num_workers):
    record = next(r for r in _recorded("mp_prefetch") if r["name"] == "map_2_workers")
    ds = grain.MapDataset.range(10).map(lambda x: x * 10).to_iter_dataset()
    if num_workers is not None:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    it = iter(ds)
    assert cases.take(it, 2) == [0, 10]
    before = it.get_state()
    with pytest.raises(StateMismatchError, match=r"num_workers=2.*mp_prefetch\(Multiprocessing"):
        it.set_state(record["state"])
    assert it.get_state() == before
    assert cases.rest(it) == [20, 30, 40, 50, 60, 70, 80, 90]
