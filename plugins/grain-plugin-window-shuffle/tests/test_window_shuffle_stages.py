"""The conformance kit's stage checks for both window-shuffle stages."""

import pytest
from grain_plugin_window_shuffle import WindowShuffleIterDataset, WindowShuffleMapDataset

import grain_core as grain
from grain_core import testing


def make_iter():
    return WindowShuffleIterDataset(grain.MapDataset.range(40).to_iter_dataset(), window_size=8, seed=3)


def make_iter_other_seed():
    return WindowShuffleIterDataset(grain.MapDataset.range(40).to_iter_dataset(), window_size=8, seed=4)


def make_map():
    return WindowShuffleMapDataset(grain.MapDataset.range(40), window_size=8, seed=3)


def make_map_other_window():
    return WindowShuffleMapDataset(grain.MapDataset.range(40), window_size=5, seed=3)


def test_iter_stage_conforms():
    testing.check_stage(make_iter, foreign=make_iter_other_seed)


def test_map_stage_conforms():
    testing.check_stage(make_map, foreign=make_map_other_window)


def test_refused_window_state_leaves_the_iterator_untouched():
    # A state that only replaying the parent can refuse (more emitted than the last window holds).
    it = iter(make_iter())
    [next(it) for _ in range(3)]
    state = it.get_state()
    expected = list(iter(make_iter()))[3:]
    # The window would start at element 36, so it holds 4 elements, not 6: refused while
    # replaying, after the parent has moved, so only the kernel's rollback keeps `it` unchanged.
    bad = dict(state, parent=dict(state["parent"], next_index=36), emitted=6)
    with pytest.raises(grain.state.StateMismatchError, match="emitted"):
        it.set_state(bad)
    assert it.get_state() == state
    assert list(it) == expected
