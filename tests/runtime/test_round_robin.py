"""One round-robin over worker shares (grain_core/runtime/round_robin.py): ``mp_prefetch``'s consumer
and ``multithread_prefetch`` take turns the same way and write one state layout, read by one
reader; states ``multithread_prefetch`` wrote in its earlier layout still restore."""

from __future__ import annotations

import json
import pathlib

import pytest

import grain_core as grain
from grain_core.runtime import round_robin
from grain_core.state import StateMismatchError

pytestmark = pytest.mark.timeout(300)

_DATA = pathlib.Path(__file__).parent / "data"


def _pipeline(n=11):
    return grain.MapDataset.range(n).map(lambda x: x * 2).to_iter_dataset()


def _uneven(n=23):  # shares end at different times
    return grain.MapDataset.range(n).to_iter_dataset().filter(lambda x: x % 4 != 1)


def test_turn_after():
    assert [round_robin.turn_after(i, 3) for i in range(3)] == [1, 2, 0]
    assert round_robin.turn_after(0, 1) == 0


def test_both_stages_write_one_layout_with_the_same_turns():
    mp = _uneven().mp_prefetch(grain.MultiprocessingOptions(num_workers=3))
    mt = grain.experimental.multithread_prefetch(_uneven(), 3, 2)
    with iter(mp) as a, iter(mt) as b:
        for _ in range(7):
            assert next(a) == next(b)
        sa, sb = a.get_state(), b.get_state()
        assert set(sa) == set(sb) == {"kind", "num_workers", "next_worker", "position", "workers"}
        assert sb["kind"] == "MultithreadPrefetchDatasetIterator"
        for key in ("num_workers", "next_worker", "position"):
            assert sa[key] == sb[key]
        assert [set(w) for w in sa["workers"]] == [set(w) for w in sb["workers"]]
        assert [set(w) for w in sb["workers"]] == [{"state", "skip", "exhausted"}] * 3
        assert list(a) == list(b)
        # Exhausted shares are recorded the same way at the end.
        assert [w["exhausted"] for w in a.get_state()["workers"]] == [
            w["exhausted"] for w in b.get_state()["workers"]
        ]


def test_a_multithread_share_state_is_the_share_pipelines_own():
    """The entries mean the same for both stages: share ``j``'s pipeline state (not a wrapper)."""
    mt = grain.experimental.multithread_prefetch(_pipeline(), 3, 2)
    it = iter(mt)
    try:
        for _ in range(4):
            next(it)
        workers = it.get_state()["workers"]
        assert [w["state"]["kind"] for w in workers] == ["PrefetchDatasetIterator"] * 3
    finally:
        it.close()


@pytest.mark.parametrize("taken", [0, 1, 5, 11, 12])
def test_multithread_state_restores_in_a_fresh_iterator(taken):
    mt = grain.experimental.multithread_prefetch(_uneven(), 3, 2)
    expected = list(_uneven().mp_prefetch(grain.MultiprocessingOptions(num_workers=3)))
    with iter(mt) as it:
        got = [next(it) for _ in range(min(taken, len(expected)))]
        state = it.get_state()
    with iter(mt) as it:
        it.set_state(json.loads(json.dumps(state)))
        assert got + list(it) == expected


def test_a_multithread_state_with_a_skip_restores():
    """``skip`` (an mp_prefetch worker writes it; multithread_prefetch writes 0) is honoured."""
    mt = grain.experimental.multithread_prefetch(_pipeline(), 3, 2)
    with iter(mt) as it:
        state = it.get_state()
    fresh = state["workers"][0]["state"]
    state["workers"][0] = {"state": fresh, "skip": 2, "exhausted": False}
    with iter(mt) as it:
        it.set_state(state)
        # share 0 is [0, 6, 12, 18]; two of its elements are skipped.
        assert [int(x) for x in it] == [12, 2, 4, 18, 8, 10, 14, 16, 20]


def test_the_layout_written_before_still_restores():
    """``data/multithread_state_v1.json`` was written by multithread_prefetch before the shared
    format (its thread-prefetch states, ``exhausted`` and ``next``): it restores exactly."""
    recorded = json.loads((_DATA / "multithread_state_v1.json").read_text())
    assert "next" in recorded["state"] and "next_worker" not in recorded["state"]
    mt = grain.experimental.multithread_prefetch(_pipeline(), 3, 2)
    with iter(mt) as it:
        assert [int(next(it)) for _ in range(5)] == recorded["first"]
    with iter(mt) as it:
        it.set_state(recorded["state"])
        assert [int(x) for x in it] == recorded["rest"]
        after = it.get_state()
        assert "next_worker" in after and "next" not in after  # written in the one layout


def test_a_state_of_another_pipeline_changes_nothing():
    mt = grain.experimental.multithread_prefetch(_pipeline(), 3, 2)
    other = grain.experimental.multithread_prefetch(_pipeline(12), 3, 2)
    with iter(other) as it:
        next(it)
        foreign = it.get_state()
    with iter(mt) as it:
        first = [next(it) for _ in range(2)]
        with pytest.raises(StateMismatchError):
            it.set_state(foreign)
        with pytest.raises(StateMismatchError, match="skip"):
            bad = it.get_state()
            bad["workers"][1] = {**bad["workers"][1], "skip": -1}
            it.set_state(bad)
        assert first + list(it) == list(mt)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda s: s.update(next_worker=3), "does not describe 3 workers"),
        (lambda s: s.update(num_workers=2), "num_workers"),
        (lambda s: s["workers"].pop(), "does not describe 3 workers"),
        (lambda s: s["workers"][0].update(exhausted="no"), "Malformed worker entry"),
        (lambda s: s["workers"][0].update(skip=round_robin.MAX_SKIP + 1), "skip"),
        (lambda s: s.update(position=-1), "Malformed position"),
    ],
)
def test_read_state_refuses_malformed_states(mutate, match):
    state = round_robin.make_state("K", 1, 4, [round_robin.Share(None, 0, False)] * 3)
    assert round_robin.read_state(state, "K", 3) == round_robin.RoundRobinState(
        1, 4, (round_robin.Share(),) * 3
    )
    state = json.loads(json.dumps(state))
    mutate(state)
    with pytest.raises(StateMismatchError, match=match):
        round_robin.read_state(state, "K", 3)
