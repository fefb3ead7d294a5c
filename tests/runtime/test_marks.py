"""Marks: worker states inside a message, so that a position inside a long message restores with
few elements skipped (``api.Mark``, ``Elements.position_after``)."""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from collections.abc import Iterator

import numpy as np
import pytest
from runtime_helpers import HeldEndpoint

import grain_core as grain
from grain_core.dataset.sharing import worker_share
from grain_core.runtime import api, worker
from grain_core.runtime.api import Elements, Mark, Position


def test_position_after_uses_the_last_mark_at_or_before_it():
    msg = Elements(1, 0, "s0", 2, list("abcdef"), (Mark(2, "s2"), Mark(5, "s5")))
    assert [msg.position_after(n) for n in range(7)] == [
        Position("s0", 2),
        Position("s0", 3),
        Position("s2", 0),
        Position("s2", 1),
        Position("s2", 2),
        Position("s5", 0),
        Position("s5", 1),
    ]
    assert Elements(1, 0, "s0", 2, ["a"]).position_after(1) == Position("s0", 3)


def test_a_group_cut_by_the_flusher_continues_from_its_last_mark():
    g = worker._Group("s0", 0, [])
    g.mark("s0'")  # no element yet: the group's own start
    assert (g.state, g.skip, g.marks) == ("s0'", 0, [])
    g.elements += ["a", "b"]
    g.mark("s2")
    g.elements.append("c")
    assert g.cut(7, 1) == Elements(7, 1, "s0'", 0, ["a", "b", "c"], (Mark(2, "s2"),))
    assert (g.state, g.skip, g.elements, g.marks) == ("s2", 1, [], [])
    g.elements.append("d")
    assert g.cut(8, 1) == Elements(8, 1, "s2", 1, ["d"])


def _dataset(n=500):
    return grain.MapDataset.range(n).map(lambda x: x * 3).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    )


def _loop(every: int, buffer: int) -> tuple[api.WorkerLoop, HeldEndpoint]:
    job = api.WorkerJob.create(
        _dataset(), grain.MultiprocessingOptions(num_workers=1, per_worker_buffer_size=buffer)
    )
    ep = HeldEndpoint()
    loop = api.WorkerLoop(job, 0, ep)
    # The spacing the loop would measure, fixed: what is tested is what marks hold.
    loop._mark_spacing = lambda: (every, worker.MAX_MESSAGE_ELEMENTS)  # type: ignore[method-assign]
    return loop, ep


@contextlib.contextmanager
def _running(loop: api.WorkerLoop, ep: HeldEndpoint) -> Iterator[None]:
    """The loop in a thread, past its template and waiting for a command; stopped afterwards."""
    thread = threading.Thread(target=loop.run, daemon=True)
    ep.waiting.clear()
    thread.start()
    try:
        assert ep.waiting.wait(60)
        yield
    finally:
        ep.commands.put(api.Stop())
        thread.join(60)
    assert not thread.is_alive()


@pytest.mark.parametrize("every", [1, 3])
def test_every_position_inside_a_message_restores_from_a_mark_exactly(every):
    loop, ep = _loop(every, buffer=40)
    with _running(loop, ep):
        ep.command(api.Start(0, None, 0))
        messages = [m for m in ep.sent if isinstance(m, Elements)]
        assert sum(len(m.elements) for m in messages) == 41
        long = max(messages, key=lambda m: len(m.elements))
        assert len(long.elements) > every
        # A mark every `every` elements (a message cut by the flusher goes on from its last one).
        offsets = [m.offset for m in long.marks]
        assert offsets and 0 < offsets[0] <= every
        assert all(b - a == every for a, b in zip(offsets, offsets[1:]))
        assert len(long.elements) - offsets[-1] <= every
        with worker_share(0, 1):  # the worker's own iterator: its share of one
            check = iter(_dataset())
        for n in range(len(long.elements)):
            pos = long.position_after(n)
            if n < offsets[0]:
                assert pos == (long.state, long.skip + n)
            else:
                assert pos.skip < every
            check.set_state(pos.state)
            for _ in range(pos.skip):
                next(check)
            assert next(check) == long.elements[n]


def test_a_restart_reads_the_skipped_elements_with_the_first_one_after_them():
    loop, ep = _loop(1, buffer=1)
    with _running(loop, ep):
        state = loop.initial
        ep.command(api.Start(1, state, 7))
        first = next(m for m in ep.sent if isinstance(m, Elements) and m.generation == 1)
        # The element after the skipped ones starts the first message, which names the position
        # of the restore itself.
        assert (first.state, first.skip, first.elements[0]) == (state, 7, 21)
        got = [x for m in ep.sent if isinstance(m, Elements) and m.generation == 1 for x in m.elements]
        assert got == [3 * i for i in range(7, 7 + len(got))]


def test_mark_spacing_keeps_marks_cheap_and_replays_short():
    loop, _ = _loop(1, buffer=1)
    del loop._mark_spacing  # the measured policy
    loop.element_seconds, loop.state_seconds = 2e-3, 1e-6  # a millisecond or more per element
    assert loop._mark_spacing() == (1, 1)  # a mark before every element
    loop.element_seconds = 300e-6  # cheap states, but 1 ms holds only 3 elements: every 3rd
    assert loop._mark_spacing() == (3, 3)
    loop.element_seconds = 100e-6  # cheap states: no closer than MIN_MARK_SPACING
    assert loop._mark_spacing() == (worker.MIN_MARK_SPACING, 10)
    loop.element_seconds, loop.state_seconds = 0.5e-6, 1e-6  # elements cheaper than a state
    every, replay = loop._mark_spacing()
    assert every == 40 and every * loop.element_seconds <= worker.MAX_REPLAY_SECONDS
    loop.element_seconds, loop.state_seconds = 1e-6, 1e-3  # a very costly state
    assert loop._mark_spacing() == (20_000, 1000)  # the group is capped at 1000 instead


def test_states_inside_long_messages_restore_exactly_through_workers():
    ds = (
        grain.MapDataset.range(600)
        .map(lambda x: sum(range(300)) * 0 + x)
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=16))
    )
    states, out = [], []
    with iter(ds) as it:
        for k in range(600):
            if k % 37 == 0:
                states.append((k, it.get_state()))
            out.append(next(it))
    assert out == list(range(600))
    for k, state in states[1::4]:
        with iter(ds) as it:
            it.set_state(state)
            assert list(it) == out[k:]


def test_a_message_returned_wholly_is_not_kept_for_the_state():
    """The consumer resolves the position after a wholly returned message at once, so it keeps
    no reference to that message's elements once the user drops them; states stay exact."""
    n = 40
    ds = (
        grain.MapDataset.range(n)
        .map(lambda x: np.full((1000,), x))
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=4))
    )
    with iter(ds) as it:
        refs = [weakref.ref(next(it)) for _ in range(n)]
        with pytest.raises(StopIteration):
            next(it)
        state = it.get_state()
        gc.collect()
        # Worker 0's last message was returned wholly, so all its elements are freed. (Worker 1's
        # last message, which holds the last element, is kept by the rollback mark: the view
        # before that element.)
        assert [r() is None for r in refs[0::2]] == [True] * (n // 2)
    with iter(ds) as it2:
        it2.set_state(state)
        assert list(it2) == []
