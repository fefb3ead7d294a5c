"""A state written by google grain switches a correct-mode pipeline to Grain's data (issue 28 item 6).

``tests/grain_state_switch/grain_states.json`` holds states google grain 0.2.18 saved in pipelines
whose data differ between Grain and grain_core's correct mode (a shuffle of ``2**16 + 1``, shuffle
-> slice -> repeat, a partial window, an uneven DataLoader shard) and every element Grain gave after
them (``record_grain.py``). Restored into the same pipeline built in correct mode, the iterator
continues with Grain's elements and logs a warning; with ``grain_exact`` set to False explicitly
the state is refused, as it is when a stage cannot switch (named in the refusal). The
window-shuffle plugin's partial window switches too: tests/integration/test_grain_state_switch_window.py.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import pathlib

import pytest

import grain_core as grain
import grain_core.python as gp
from grain_core.global_config import DataModeError

HERE = pathlib.Path(__file__).resolve().parent / "grain_state_switch"
_spec = importlib.util.spec_from_file_location("_gss_cases", HERE / "cases.py")
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)
RECORDED = json.loads((HERE / "grain_states.json").read_text())
assert RECORDED["recorded_from"].startswith("google grain 0.2.18")

SWITCHING = [
    "shuffle_65537",
    "shuffle_65537_map_batch",
    "shuffle_65537_iter_batch",
    "slice_repeat",
    "slice_repeat_map_batch",
    "slice_repeat_mp_prefetch",
]


def _restore(name, state=None):
    it = iter(cases.make(name, grain, gp))
    it.set_state(RECORDED["cases"][name]["state"] if state is None else state)
    return it


@pytest.mark.parametrize("name", SWITCHING)
def test_a_grain_state_switches_a_correct_mode_pipeline_to_grains_data(name, caplog):
    assert grain.config.grain_exact is False
    with caplog.at_level(logging.WARNING, logger="grain_core.dataset.grain_exact_switch"):
        it = _restore(name)
        assert cases.rest(it) == RECORDED["cases"][name]["after"]
    if "mp_prefetch" not in name:  # the workers log it in their own processes
        text = caplog.text
        assert "written by google grain" in text and "Grain-exact mode" in text
        assert "update('grain_exact', False)" in text  # how to opt out


def test_the_pipeline_the_user_built_keeps_correct_mode():
    ds = grain.MapDataset.range(10).shuffle(seed=42)[:4].repeat(3)
    it = iter(ds.to_iter_dataset())
    it.set_state({"next_index": 5})
    assert list(it) == RECORDED["cases"]["slice_repeat"]["after"]
    assert [ds[i] for i in range(12)] == [8, 6, 7, 9] * 3  # the dataset itself: correct mode
    assert list(ds.to_iter_dataset()) == [8, 6, 7, 9] * 3


def test_a_switched_iterators_state_switches_a_fresh_iterator_and_a_correct_state_switches_back():
    name = "slice_repeat"
    it = _restore(name)
    next(it)
    saved = it.get_state()
    assert saved["from_grain"] is True
    assert not any("data_mode" in s for s in saved["stages"])
    assert cases.rest(_restore(name, saved)) == RECORDED["cases"][name]["after"][1:]
    with grain.config.override(grain_exact=False):  # opted out: refused too
        with pytest.raises(DataModeError, match="set to False explicitly"):
            _restore(name, saved)
    correct = iter(cases.make(name, grain, gp))
    next(correct)
    correct_state = correct.get_state()
    it.set_state(correct_state)  # a state of the pipeline as built: back to correct mode
    assert "from_grain" not in it.get_state()
    assert list(it) == [6, 7, 9] + [8, 6, 7, 9] * 2


def test_grain_exact_set_to_false_explicitly_refuses_grain_states():
    for name in ("slice_repeat", "shuffle_65537"):
        with grain.config.override(grain_exact=False):
            it = iter(cases.make(name, grain, gp))
            before = it.get_state()
            with pytest.raises(DataModeError, match=r"update\('grain_exact', True\)"):
                it.set_state(RECORDED["cases"][name]["state"])
            assert it.get_state() == before


def test_grain_exact_pipelines_restore_grain_states_without_switching(caplog):
    with grain.config.override(grain_exact=True):
        it = iter(cases.make("slice_repeat", grain, gp))
    with caplog.at_level(logging.WARNING, logger="grain_core.dataset.grain_exact_switch"):
        it.set_state(RECORDED["cases"]["slice_repeat"]["state"])
    assert "from_grain" not in it.get_state()
    assert not caplog.text
    assert list(it) == RECORDED["cases"]["slice_repeat"]["after"]


def test_a_switched_mp_prefetch_state_restores_into_a_fresh_pipeline():
    name = "slice_repeat_mp_prefetch"
    it = _restore(name)
    try:
        first = cases.to_json(next(it))
        saved = it.get_state()
    finally:
        it.close()
    assert [first] + cases.rest(_restore(name, saved)) == RECORDED["cases"][name]["after"]


class _Stubborn(grain.MapDataset):
    """Records correct mode and offers no Grain-exact copy of itself (no ``_as_grain_exact``)."""

    def __init__(self, parent):
        super().__init__(parent)

    def __len__(self):
        return len(self._parent)

    def __getitem__(self, index):
        return self._parent[index]

    def fingerprint_fields(self):
        return {"data_mode": "correct"}


def test_a_stage_that_cannot_switch_is_named_and_nothing_changes():
    it = iter(_Stubborn(grain.MapDataset.range(10).shuffle(seed=42)[:4].repeat(3)).to_iter_dataset())
    before = it.get_state()
    with pytest.raises(DataModeError, match="its _Stubborn stage"):
        it.set_state({"next_index": 5})
    assert it.get_state() == before
    assert list(it) == [8, 6, 7, 9] * 3
