"""A state written by google grain cannot switch a correct-mode ``WindowShuffleMapDataset`` with a
partial last window: the refusal names that stage (the rest of the switch is tested in
tests/test_grain_state_switch.py; this needs the window-shuffle plugin, which the integration
session installs). Recorded data: ``tests/grain_state_switch/grain_states.json``
(``record_grain.py``, google grain 0.2.18)."""

from __future__ import annotations

import importlib.util
import json
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


def _restore(name):
    it = iter(cases.make(name, grain, gp))
    it.set_state(RECORDED["cases"][name]["state"])
    return it


def _rest(it):
    try:
        return [cases.to_json(x) for x in it]
    finally:
        if hasattr(it, "close"):
            it.close()


def test_a_stage_that_cannot_switch_is_named():
    it = iter(cases.make("window_partial", grain, gp))
    before = it.get_state()
    with pytest.raises(DataModeError, match="its WindowShuffleMapDataset stage"):
        it.set_state(RECORDED["cases"]["window_partial"]["state"])
    assert it.get_state() == before
    with grain.config.override(grain_exact=True):  # built in Grain-exact mode: Grain's data
        exact = _restore("window_partial")
    assert _rest(exact) == RECORDED["cases"]["window_partial"]["after"]
