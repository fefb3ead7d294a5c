"""States saved by google grain's packers (``{"parent", "next_row", "counter"}``) restore into the
same grain_core pipeline at the same position: after each recorded state, the rows are the ones
Grain yielded (recorded from google grain 0.2.18 in ``data/grain_0_2_18_packing_states.json``)."""

from __future__ import annotations

import json
import pathlib

import pytest
from grain_packing_cases import CASES, build, plain

import grain_core as grain
from grain_core.state import StateMismatchError

RECORDED = json.loads((pathlib.Path(__file__).parent / "data" / "grain_0_2_18_packing_states.json").read_text())


@pytest.mark.parametrize("case", sorted(CASES))
def test_grain_rows_are_ours(case):
    assert [plain(r) for r in build(grain, case)] == RECORDED[case]["rows"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_grain_state_restores_at_the_same_row(case):
    rows, states = RECORDED[case]["rows"], RECORDED[case]["states"]
    for k, state in enumerate(states):
        it = iter(build(grain, case))
        it.set_state(state)
        assert [plain(r) for r in it] == rows[k:], k


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_grain_state_restores_into_an_iterator_that_has_moved(case):
    """The translation does not depend on where the iterator being restored stands."""
    rows, states = RECORDED[case]["rows"], RECORDED[case]["states"]
    for k in range(0, len(states), 3):
        it = iter(build(grain, case))
        for _ in range(min(len(rows), 2 + k % 5)):
            next(it)
        it.set_state(states[k])
        assert [plain(r) for r in it] == rows[k:], k


def test_a_grain_state_of_another_stage_is_refused_and_changes_nothing():
    it = iter(build(grain, "first_fit_3_bins"))
    next(it)
    before = it.get_state()
    with pytest.raises(StateMismatchError):
        it.set_state({"parent": {"next_index": 2}, "next_row": 1, "bogus": 3})
    assert it.get_state() == before
