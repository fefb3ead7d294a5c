"""DataLoader states record the data mode (issue 28 item 6; grain_core/checkpoint/dataloader_mode.py).

A loader whose data differ between correct mode and Grain-exact mode (an uneven shard, a shuffle of
``2**16 + 1`` records) records ``"data_mode": "correct"`` when built in correct mode; a state
restored into a loader built in the other mode is refused with ``DataModeError`` saying why and
how to switch, and the iterator is unchanged. A state written by google grain
(``tests/grain_state_switch/grain_states.json``) restores into such a loader built in Grain-exact
mode, with Grain's data, and is refused in correct mode naming the sampler.
"""

from __future__ import annotations

import json
import logging
import pathlib

import pytest

import grain_core as grain
from grain_core.global_config import DataModeError
from grain_core.state import StateMismatchError

RECORDED = json.loads(
    (pathlib.Path(__file__).resolve().parent / "grain_state_switch" / "grain_states.json").read_text()
)


def _uneven(**kw):
    sampler = grain.samplers.IndexSampler(
        num_records=10, shard_options=grain.sharding.ShardOptions(0, 3, drop_remainder=False),
        shuffle=True, num_epochs=2, seed=3,
    )
    return grain.DataLoader(data_source=grain.sources.RangeDataSource(0, 10, 1), sampler=sampler, **kw)


def _even():
    sampler = grain.samplers.IndexSampler(
        num_records=12, shard_options=grain.sharding.ShardOptions(0, 3), shuffle=True, num_epochs=1, seed=3
    )
    return grain.DataLoader(data_source=list(range(12)), sampler=sampler, worker_count=0)


def _state_after(loader, n):
    it = iter(loader)
    for _ in range(n):
        next(it)
    return it, it.get_state()


def test_a_correct_mode_state_records_its_mode_and_is_refused_in_grain_exact_mode():
    it, state = _state_after(_uneven(worker_count=0), 2)
    assert json.loads(state)["data_mode"] == "correct"
    with grain.config.override(grain_exact=True):
        exact_loader = _uneven(worker_count=0)
    exact_it, exact_state = _state_after(exact_loader, 2)
    assert "data_mode" not in json.loads(exact_state)
    before = exact_it.get_state()
    with pytest.raises(DataModeError, match=r"written in correct mode.*update\('grain_exact', False\)"):
        exact_it.set_state(state)
    assert exact_it.get_state() == before
    before = it.get_state()
    with pytest.raises(DataModeError, match=r"uneven.*update\('grain_exact', True\)"):
        it.set_state(exact_state)
    assert it.get_state() == before
    rest = list(it)
    it.set_state(state)  # its own mode: restores
    assert list(it) == rest


def test_a_loader_the_mode_does_not_change_restores_either_modes_states():
    it, state = _state_after(_even(), 1)
    assert "data_mode" not in json.loads(state)
    with grain.config.override(grain_exact=True):
        other = iter(_even())
    other.set_state(state)
    assert list(other) == list(it)


def test_a_grain_dataloader_state_restores_in_grain_exact_mode_and_switches_a_correct_mode_loader(
    caplog,
):
    case = RECORDED["cases"]["dataloader_uneven_shard"]
    grain_state = json.dumps(case["state"]).encode()
    with grain.config.override(grain_exact=True):
        exact = iter(_uneven(worker_count=0))
    exact.set_state(grain_state)
    assert [int(x) for x in exact] == case["after"]
    # Built in correct mode: the iterator switches to Grain's data and says so.
    loader = _uneven(worker_count=0)
    it = iter(loader)
    next(it)
    with caplog.at_level(logging.WARNING, logger="grain_core.checkpoint.dataloader_mode"):
        it.set_state(grain_state)
    assert "written by google grain" in caplog.text and "IndexSampler" in caplog.text
    saved = it.get_state()
    assert json.loads(saved)["from_grain"] is True and "data_mode" not in json.loads(saved)
    assert [int(x) for x in it] == case["after"]
    # Its own state switches a fresh iterator of the correct-mode loader too ...
    again = iter(loader)
    again.set_state(saved)
    assert [int(x) for x in again] == case["after"]
    # ... and a correct-mode state of the loader as built switches it back.
    fresh, correct_state = _state_after(loader, 1)
    correct_rest = [int(x) for x in fresh]
    again.set_state(correct_state)
    assert [int(x) for x in again] == correct_rest
    assert sorted(correct_rest + [0]) != sorted(case["after"])  # the two modes' data differ
    assert not loader.sampler._grain_exact  # the loader the user built is unchanged


def test_a_grain_dataloader_state_is_refused_when_grain_exact_is_set_false_explicitly():
    case = RECORDED["cases"]["dataloader_uneven_shard"]
    it = iter(_uneven(worker_count=0))
    before = it.get_state()
    with grain.config.override(grain_exact=False):
        with pytest.raises(DataModeError, match=r"written by google grain.*IndexSampler.*uneven"):
            it.set_state(json.dumps(case["state"]).encode())
    assert it.get_state() == before


def test_a_grain_state_of_another_worker_count_is_refused_without_switching():
    case = RECORDED["cases"]["dataloader_uneven_shard"]  # saved by a loader without workers
    it = iter(_uneven(worker_count=2))
    try:
        before = it.get_state()
        with pytest.raises(StateMismatchError, match="Worker count in checkpoint"):
            it.set_state(json.dumps(case["state"]).encode())
        assert it.get_state() == before and "from_grain" not in json.loads(before)
    finally:
        it.close()


def test_a_grain_state_of_a_loader_with_workers_switches_a_correct_mode_loader_with_workers():
    case = RECORDED["cases"]["dataloader_uneven_shard_workers"]
    grain_state = json.dumps(case["state"]).encode()
    it = iter(_uneven(worker_count=2))
    try:
        it.set_state(grain_state)
        saved = it.get_state()
        assert json.loads(saved)["from_grain"] is True
        assert [int(x) for x in it] == case["after"]
    finally:
        it.close()
    again = iter(_uneven(worker_count=2))
    try:
        again.set_state(saved)
        assert [int(x) for x in again] == case["after"]
    finally:
        again.close()
