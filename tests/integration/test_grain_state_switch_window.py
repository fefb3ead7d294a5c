"""A state written by google grain switches a correct-mode ``WindowShuffleMapDataset`` with a
partial last window to Grain's data, as it switches the kernel's stages (tested in
tests/test_grain_state_switch.py; this needs the window-shuffle plugin, which the integration
session installs). Recorded data: ``tests/grain_state_switch/grain_states.json``
(``record_grain.py``, google grain 0.2.18)."""

from __future__ import annotations

import importlib.util
import json
import logging
import pathlib

import pytest

import grain_core as grain
import grain_core.python as gp
from grain_core.global_config import DataModeError

HERE = pathlib.Path(__file__).resolve().parents[1] / "grain_state_switch"
_spec = importlib.util.spec_from_file_location("_gss_cases", HERE / "cases.py")
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)
RECORDED = json.loads((HERE / "grain_states.json").read_text())
CASE = RECORDED["cases"]["window_partial"]


def _restore(state):
    it = iter(cases.make("window_partial", grain, gp))
    it.set_state(state)
    return it


def test_a_grain_state_switches_the_partial_window_to_grains_data(caplog):
    assert grain.config.grain_exact is False
    correct = [cases.to_json(x) for x in cases.make("window_partial", grain, gp)]
    with caplog.at_level(logging.WARNING, logger="grain_core.dataset.grain_exact_switch"):
        it = _restore(CASE["state"])
    assert "WindowShuffleMapDataset" in caplog.text and "Grain-exact mode" in caplog.text
    saved = it.get_state()
    rest = cases.rest(it)
    assert rest == CASE["after"]
    assert saved["from_grain"] is True
    assert cases.rest(_restore(saved)) == CASE["after"]  # its own state switches a fresh iterator too
    # The dataset as built keeps correct mode: every epoch a permutation of its elements.
    assert sorted(correct) == sorted(list(range(10)) * 2)


def test_built_in_grain_exact_mode_reads_grains_data_without_switching(caplog):
    with grain.config.override(grain_exact=True):
        with caplog.at_level(logging.WARNING, logger="grain_core.dataset.grain_exact_switch"):
            it = _restore(CASE["state"])
        assert cases.rest(it) == CASE["after"]
    assert not caplog.text


def test_explicit_opt_out_refuses_the_grain_state():
    it = iter(cases.make("window_partial", grain, gp))
    before = it.get_state()
    with grain.config.override(grain_exact=False):
        with pytest.raises(DataModeError, match="WindowShuffleMapDataset"):
            it.set_state(CASE["state"])
    assert it.get_state() == before
