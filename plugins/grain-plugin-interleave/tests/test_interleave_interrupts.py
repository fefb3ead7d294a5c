"""Ctrl-C inside ``next()`` of an interleave iterator, then continuing it, loses and repeats nothing;
and interleave reads and returns chunks in Grain's order with exact states.

Interrupts come from a real ``SIGALRM`` interval timer (``grain_core.testing.Interrupter``: it raises
``KeyboardInterrupt`` wherever the main thread is inside grain_core or this plugin, waits included,
at most once per ``next()`` call) and from ``grain_core.testing.Injector`` at the points where the consumer waits on
interleave's threads (a reader's buffer, an iterator being opened ahead). No assertion depends on
timing: every test compares the elements with the uninterrupted list.

Progress is guaranteed: after ``IN_A_ROW`` interrupted calls in a row the next call runs unarmed.
Arming every call can livelock on a loaded machine: a give-back that restores interleave's state
restarts its reader threads cold, so every retry waits on them longer than the timer's interval
and is interrupted again (a test once spun for 20 minutes that way; SIGALRM is the Interrupter's
then, so pytest-timeout's signal cannot end it). Each drain also has a deadline.
"""

from __future__ import annotations

import gc
import json
import signal
import sys
import threading
import time

import grain_plugin_interleave
import numpy as np
import pytest
from grain_plugin_interleave import interleave as impl

import grain_core as grain
from grain_core import testing
from grain_core.author import ReadAhead
from grain_core.dataset.prefetch import PrefetchDatasetIterator

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers"),
]

# The consumer waits in interleave's own code (a raw lock's timed acquire), so interrupts land in
# its waits too. (Not `threading`: its Condition code is not safe against asynchronous exceptions.)
# This module's functions (the datasets' user code) are interrupted too; the loops calling next()
# here are excluded (see Interrupter's `exclude`).
OURS = (grain, grain_plugin_interleave, sys.modules[__name__])
THREADS = [
    {},
    {"iter_buffer_size": 1},
    {"iter_buffer_size": 3, "num_make_iter_threads": 2, "make_iter_buffer_size": 2},
]


def _work(x):
    a = np.arange(100, dtype=np.float64) + x
    for _ in range(3):
        a = np.sqrt(a * a + 1.0)
    return int(x)


def _lengths(n_datasets):
    return [5 + (7 * d) % 23 for d in range(n_datasets)]


def _inter(cycle=3, n_datasets=12, **kw):
    ro = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    datasets = [
        grain.MapDataset.range(1000 * d, 1000 * d + n).map(_work).to_iter_dataset(ro)
        for d, n in enumerate(_lengths(n_datasets))
    ]
    return grain.experimental.InterleaveIterDataset(datasets, cycle_length=cycle, **kw)


IN_A_ROW = 2
DEADLINE = 240.0  # seconds: a hang guard for a loaded machine, not a speed check


def _drain(it, packages=OURS):
    """``testing.drain_with_interrupts`` with at most ``IN_A_ROW`` interrupted calls in a row and a
    deadline; returns ``(elements, interrupts)``."""
    out, in_a_row = [], 0
    deadline = time.monotonic() + DEADLINE
    with testing.Interrupter(packages=packages, exclude=(_drain,)) as intr:
        while True:
            assert time.monotonic() < deadline, f"no end after {DEADLINE} s ({len(out)} elements)"
            intr.armed = in_a_row < IN_A_ROW
            try:
                x = next(it)
            except KeyboardInterrupt:
                in_a_row += 1
                continue
            except StopIteration:
                break
            finally:
                intr.armed = False
            in_a_row = 0
            out.append(x)
    return out, intr.raised


def _interleave_threads():
    return [t for t in threading.enumerate() if t.name.startswith("interleave")]


def _wait_no_threads(timeout=30.0):  # a hang guard for a loaded machine, not a speed check
    deadline = time.monotonic() + timeout
    while _interleave_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    return _interleave_threads()


@pytest.mark.parametrize("threads", THREADS)
def test_real_interrupts_lose_and_repeat_nothing(threads):
    expected = list(_inter(**threads))
    ds = _inter(**threads)
    it = iter(ds)
    out, raised = _drain(it)
    state = it.get_state()
    it.close()
    assert raised > 0
    assert out == expected
    it = iter(ds)
    it.set_state(state)  # the state after all that is exact
    assert list(it) == []
    it.close()
    assert _wait_no_threads() == []


@pytest.mark.parametrize("threads", THREADS)
def test_states_taken_after_interrupts_restore_exactly(threads):
    expected = list(_inter(**threads))
    ds = _inter(**threads)
    it = iter(ds)
    taken, states, in_a_row = [], [], 0
    loop = test_states_taken_after_interrupts_restore_exactly
    deadline = time.monotonic() + DEADLINE
    with testing.Interrupter(packages=OURS, exclude=(loop,)) as intr:
        while True:
            assert time.monotonic() < deadline, f"no end after {DEADLINE} s"
            intr.armed = in_a_row < IN_A_ROW
            try:
                x = next(it)
            except KeyboardInterrupt:
                intr.armed = False
                in_a_row += 1
                states.append((len(taken), it.get_state()))  # right after an interrupt
                continue
            except StopIteration:
                break
            finally:
                intr.armed = False
            in_a_row = 0
            taken.append(x)
    it.close()
    assert intr.raised > 0 and taken == expected
    for pos, state in states[:: max(1, len(states) // 8)]:
        it = iter(ds)
        it.set_state(json.loads(json.dumps(state)))
        assert list(it) == expected[pos:]
        it.close()


@pytest.mark.parametrize("threads", THREADS)
def test_stages_after_interleave_survive_real_interrupts(threads):
    """Map and batch run in the caller's thread on interleave's chunks."""
    ds = _inter(**threads).map(lambda x: _work(x) * 2).batch(5)
    expected = [b.tolist() for b in _inter(**threads).map(lambda x: x * 2).batch(5)]
    with iter(ds) as it:
        out, raised = _drain(it)
    assert raised > 0
    assert [b.tolist() for b in out] == expected
    assert _wait_no_threads() == []


def test_interrupts_while_waiting_on_a_reader_thread():
    kw = {"iter_buffer_size": 2}
    expected = list(_inter(**kw))
    with testing.Injector(ReadAhead, "peek", every=3) as injected:
        it = iter(_inter(**kw))
        assert testing.drain_with_injected(it, injected) == expected
        it.close()
    assert _wait_no_threads() == []


def test_interrupts_while_waiting_on_an_opening_thread():
    kw = {"num_make_iter_threads": 2, "make_iter_buffer_size": 3}
    expected = list(_inter(**kw))
    with testing.Injector(impl.InterleaveIterDataset, "_open", every=2) as injected:
        it = iter(_inter(**kw))
        assert testing.drain_with_injected(it, injected) == expected
        it.close()
    assert _wait_no_threads() == []


def test_no_thread_left_after_interrupts_and_garbage_collection():
    it = iter(_inter(iter_buffer_size=2, num_make_iter_threads=1))
    loop = test_no_thread_left_after_interrupts_and_garbage_collection
    with testing.Interrupter(packages=OURS, exclude=(loop,)) as intr:
        for _ in range(40):
            intr.armed = True
            try:
                next(it)
            except KeyboardInterrupt:
                pass
            finally:
                intr.armed = False
    assert _interleave_threads()
    del it
    gc.collect()
    assert _wait_no_threads() == []


# --- chunks ------------------------------------------------------------------------------------------


def _read_by_chunks(it, sizes):
    out, k = [], 0
    while True:
        n = sizes[k % len(sizes)]
        k += 1
        try:
            out += it.next_chunk(n) if n > 0 else [next(it)]
        except StopIteration:
            return out


@pytest.mark.parametrize("threads", [{}, {"iter_buffer_size": 4}])
@pytest.mark.parametrize("cycle", [1, 2, 3, 5])
def test_chunks_keep_grains_order_and_exact_states(threads, cycle):
    ds = _inter(cycle=cycle, n_datasets=9, **threads)
    expected = list(ds)
    rng = np.random.default_rng(cycle)
    sizes = [int(s) for s in rng.integers(0, 40, 12)]
    with iter(ds) as it:
        assert _read_by_chunks(it, sizes) == expected
    with iter(ds) as it:  # a state after every chunk restores the rest exactly
        pos, checked = 0, 0
        while True:
            try:
                pos += len(it.next_chunk(int(rng.integers(1, 30))))
            except StopIteration:
                break
            if checked < 6:
                checked += 1
                with iter(ds) as other:
                    other.set_state(json.loads(json.dumps(it.get_state())))
                    assert list(other) == expected[pos:]
        assert pos == len(expected)


def test_chunks_are_pulled_from_the_datasets(monkeypatch):
    """Interleave asks each open dataset for several elements at once (the chunk protocol)."""
    asked = []
    orig = PrefetchDatasetIterator.next_chunk

    def spy(self, max_elements):
        asked.append(max_elements)
        return orig(self, max_elements)

    monkeypatch.setattr(PrefetchDatasetIterator, "next_chunk", spy)
    ds = _inter(cycle=3)
    with iter(ds) as it:
        assert _read_by_chunks(it, [64]) == list(_inter(cycle=3))
    assert max(asked) > 1


def test_chunks_after_an_interrupted_downstream_stage_are_given_back():
    """A map whose function is interrupted hands interleave's chunk back: nothing lost."""
    calls = {"n": 0}

    def flaky(x):
        calls["n"] += 1
        if calls["n"] % 17 == 0:
            raise KeyboardInterrupt
        return x

    for threads in ({}, {"iter_buffer_size": 3}):
        expected = list(_inter(**threads))
        it = iter(_inter(**threads).map(flaky))
        out = []
        while True:
            try:
                out += it.next_chunk(16)
            except KeyboardInterrupt:
                continue
            except StopIteration:
                break
        it.close()
        assert out == expected
