"""The read-ahead policy of a threaded ``to_iter_dataset`` (``grain_core.dataset.read_policy``).

The policy decides only *how* chunks are read (ahead of the consumer by the pool, or on demand);
these tests check its decisions on made-up measurements (it has no clock), and that the iterator's
output, state, memory bound, slow-element guarantee, Ctrl-C safety and clean-up are the same in
both modes and across switches, by replacing the iterator's policy with scripted decisions. No
check depends on timing.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import numpy as np
import pytest
from test_chunks import (
    CountingSource,
    check_read_ahead_within_buffer,
    check_slow_element_does_not_hold_back,
)

import grain_core as grain
from grain_core.dataset import prefetch
from grain_core.dataset.read_policy import ReadModePolicy, ReadStep
from grain_core.dataset.read_threads import FixedVerdict
from grain_core.dataset.trees import iterator_tree
from grain_core.testing import drain_with_interrupts

P = ReadModePolicy
STEP = 1 / 64  # seconds per made-up step


def _window(policy: ReadModePolicy, rate: float, *, skip: int = 0, step: float = STEP) -> None:
    """Feeds ``skip`` steps to be skipped, then one window of the current mode at about ``rate``
    elements/s: ``MIN_STEPS`` (``EXPLORE_STEPS`` while exploring) steps of ``step`` seconds
    (binary fractions, so sums are exact)."""
    exploring = policy.phase in ("first", "second")
    steps = P.EXPLORE_STEPS if exploring else P.MIN_STEPS
    assert steps * step >= (P.EXPLORE_SECONDS if exploring else P.MIN_SECONDS)
    mode = policy.read_ahead
    for _ in range(skip):
        policy.record(ReadStep(mode, 10**6, 0.0))  # absurdly fast: counted, it would show
    for _ in range(steps):
        policy.record(ReadStep(mode, round(rate * step), step))


def _windows_until_switch(policy: ReadModePolicy, rate: float, skip: int = P.SKIP_STEPS) -> int:
    """Feeds windows at ``rate`` until the policy switches; the first after ``skip`` steps
    (``SKIP_STEPS`` after the policy switched back, none when it kept the mode it had)."""
    mode, n = policy.read_ahead, 0
    while policy.read_ahead == mode:
        _window(policy, rate, skip=skip if n == 0 else 0)
        n += 1
    return n


def _first_windows(p: ReadModePolicy, rate: float, step: float = STEP) -> None:
    """The ``FIRST_WINDOWS`` windows of the starting mode (not reading ahead, unless
    ``start_reading_ahead`` was called) that start a policy."""
    for k in range(P.FIRST_WINDOWS):
        _window(p, rate, skip=P.FIRST_SKIP_STEPS if k == 0 else 0, step=step)


def _explored(ahead_rate: float, demand_rate: float) -> ReadModePolicy:
    """A policy that measured not reading ahead at ``demand_rate``, then reading ahead at
    ``ahead_rate``."""
    p = ReadModePolicy()
    _first_windows(p, demand_rate)
    _window(p, ahead_rate, skip=P.SKIP_STEPS)
    return p


# --- the policy on its own ---------------------------------------------------------------------


def test_starts_without_reading_ahead_then_measures_reading_ahead():
    p = ReadModePolicy()
    assert not p.read_ahead and p.phase == "first"
    _window(p, 1000.0, skip=P.FIRST_SKIP_STEPS)
    for _ in range(P.FIRST_WINDOWS - 1):  # FIRST_WINDOWS windows: the best one counts
        assert not p.read_ahead and p.phase == "first"
        _window(p, 900.0)
    assert p.read_ahead and p.phase == "second"
    assert p.rate(False) == pytest.approx(1000.0, rel=0.05)


def test_start_reading_ahead_explores_reading_ahead_first():
    p = ReadModePolicy()
    p.start_reading_ahead()
    assert p.read_ahead and p.phase == "first"
    _first_windows(p, 1000.0)
    assert not p.read_ahead and p.phase == "second"
    _window(p, 1000.0 * P.SWITCH_MARGIN * 0.95, skip=P.SKIP_STEPS)
    assert p.read_ahead and p.phase == "keep"  # the first mode stays unless beaten by the margin


def test_cheap_reads_do_not_read_ahead():
    p = _explored(1000.0, 3000.0)
    assert not p.read_ahead and p.phase == "keep"


def _read_share_window(p: ReadModePolicy, share: float, skip: int = 0) -> None:
    """One window not reading ahead at 1000 elements/s whose chunks took ``share`` of its time
    to read while the consumer waited."""
    exploring = p.phase in ("first", "second")
    for _ in range(skip):
        p.record(ReadStep(False, 10**6, 0.0, read_seconds=0.0))
    for _ in range(P.EXPLORE_STEPS if exploring else P.MIN_STEPS):
        p.record(ReadStep(False, round(1000 * STEP), STEP, read_seconds=share * STEP))


def test_reading_ahead_not_tried_where_it_cannot_win_by_the_margin():
    """Reading ahead at best hides the read time: reads taking under 1 - 1/SWITCH_MARGIN of the
    consumer's time are never worth measuring it, not at the start, not at a due probe, not
    after a drop in rate."""
    limit = 1 - 1 / P.SWITCH_MARGIN
    p = ReadModePolicy()
    _read_share_window(p, limit * 0.9, skip=P.FIRST_SKIP_STEPS)
    _read_share_window(p, limit * 0.9)
    assert not p.read_ahead and p.phase == "keep"
    for _ in range(50):
        _read_share_window(p, limit * 0.9)
        assert not p.read_ahead and p.phase == "keep"
    for _ in range(P.MIN_STEPS):  # a sharp drop, still with cheap reads
        p.record(ReadStep(False, round(100 * STEP), STEP, read_seconds=0.0))
    assert not p.read_ahead and p.phase == "keep"
    _read_share_window(p, limit * 1.1)  # reads turned expensive: reading ahead is probed
    assert p.read_ahead and p.phase == "probe"


@pytest.mark.parametrize("share", [0.25, 0.9])
def test_reading_ahead_explored_where_reads_take_enough_of_the_time(share):
    p = ReadModePolicy()
    _read_share_window(p, share, skip=P.FIRST_SKIP_STEPS)
    _read_share_window(p, share)
    assert p.read_ahead and p.phase == "second"


def test_reading_ahead_explored_when_read_times_are_unknown():
    p = ReadModePolicy()
    _first_windows(p, 1000.0)  # steps without read_seconds
    assert p.read_ahead and p.phase == "second"


def test_reading_ahead_chosen_when_faster_by_the_margin():
    p = _explored(5000.0, 1000.0)
    assert p.read_ahead and p.phase == "keep"
    p = _explored(1000.0 * P.SWITCH_MARGIN * 0.95, 1000.0)
    assert not p.read_ahead and p.phase == "keep"


def _io_like(p: ReadModePolicy, read_ahead: bool, steps: int) -> None:
    """Steps as a source whose reads wait on I/O (``time.sleep`` in ``__getitems__``, ArrayRecord)
    gives them: read when asked for, one element per chunk (a chunk that slow is not grown) taking
    25 ms, a rate of 40/s; read ahead by 16 threads, 16 times that once the pool has read a
    buffer's worth (before, the consumer waits for the first reads: 40/s, unsettled)."""
    for k in range(steps):
        if read_ahead == p.read_ahead and read_ahead:
            p.record(ReadStep(True, 16, 1 / 40, settled=k >= 4))
        elif read_ahead == p.read_ahead:
            p.record(ReadStep(False, 1, 1 / 40, read_seconds=1 / 40))
        else:
            return


def test_io_like_reads_are_read_ahead_and_stay_so():
    """The decision for reads that release the GIL, on scripted steps (no timing): the policy
    measures reading ahead after its first windows, chooses it, and keeps it through its probes."""
    p = ReadModePolicy()
    _io_like(p, False, 1000)  # until the policy tries reading ahead
    assert p.read_ahead and p.phase == "second"
    assert not p.inline  # reads this slow were not made by the consumer itself
    probes = 0
    for _ in range(2000):
        if p.read_ahead:
            _io_like(p, True, 1000)
        else:
            probes += 1
            _io_like(p, False, 1000)
        assert p.phase in ("keep", "probe")
    assert probes >= 2 and p.read_ahead and p.phase == "keep"
    assert p.rate(True) > 10 * p.rate(False)


def test_inline_only_after_quick_reads_in_a_row():
    """Chunks read when asked for are read by the consumer itself (inline) once
    ``INLINE_AGAIN_STEPS`` in a row took under ``INLINE_MAX_SECONDS`` to read; one that took
    longer (or a slow head chunk: the iterator reports how long it waited) sends the next ones to
    the pool again. Chunks read ahead (``read_seconds`` None) do not count either way."""
    p = ReadModePolicy()
    assert not p.inline
    quick = ReadStep(False, 10, 0.001, read_seconds=P.INLINE_MAX_SECONDS / 2)
    slow = ReadStep(False, 10, 0.001, read_seconds=P.INLINE_MAX_SECONDS)
    for _ in range(P.INLINE_AGAIN_STEPS - 1):
        p.record(quick)
    p.record(ReadStep(True, 10, 0.001))
    assert not p.inline
    p.record(quick)
    assert p.inline
    for _ in range(3 * P.INLINE_AGAIN_STEPS):
        p.record(quick)
        p.record(ReadStep(True, 10, 0.001))
    assert p.inline
    p.record(slow)
    assert not p.inline
    for _ in range(P.INLINE_AGAIN_STEPS - 1):
        p.record(quick)
    p.record(slow)
    for _ in range(P.INLINE_AGAIN_STEPS - 1):
        p.record(quick)
    assert not p.inline  # in a row
    p.record(quick)
    assert p.inline


def test_steps_of_the_other_mode_and_skipped_steps_do_not_count():
    p = ReadModePolicy()
    for _ in range(100):
        p.record(ReadStep(True, 10**6, 1e-9))  # chunks read ahead (after start_prefetch, say)
    assert not p.read_ahead and p.phase == "first"
    for _ in range(P.FIRST_SKIP_STEPS):
        p.record(ReadStep(False, 10**6, 1e-9))
    assert p.phase == "first" and p.rate(False) == 0.0
    _window(p, 1000.0)
    assert p.rate(False) == pytest.approx(1000.0, rel=0.05)


def test_unsettled_steps_are_not_measured_but_their_time_counts():
    p = ReadModePolicy(read_ahead=True)
    for _ in range(P.FIRST_SKIP_STEPS + 10 * P.MIN_STEPS):
        p.record(ReadStep(True, 1, 1.0, settled=False))  # reading ahead, pool still filling
    assert p.phase == "first" and p.rate(True) == 0.0
    _window(p, 1000.0, skip=P.FIRST_SKIP_STEPS)
    assert p.rate(True) == pytest.approx(1000.0, rel=0.05)


def test_an_unsettled_pool_is_not_measured_by_the_iterator():
    """The iterator marks steps read ahead as settled only once the pool has read a buffer's
    worth since it (re)started, and reports how long each chunk read when asked for took."""
    it = iter(grain.MapDataset.range(3000).to_iter_dataset(grain.ReadOptions(num_threads=2)))
    policy = _scripted(it, SCRIPTS["flip every 3"])
    assert list(it) == list(range(3000))
    ahead = [s for s in policy.steps if s.read_ahead]
    assert ahead and not all(s.settled for s in ahead)
    assert all(s.read_seconds is None for s in ahead)
    asked = [s for s in policy.steps if not s.read_ahead]
    assert asked and all(s.settled and s.read_seconds is not None for s in asked)
    it.close()


def test_a_window_needs_steps_and_seconds():
    q = ReadModePolicy()  # many steps, but together shorter than MIN_SECONDS: no window yet
    for _ in range(P.FIRST_SKIP_STEPS):
        q.record(ReadStep(False, 1, 0.0))
    for _ in range(10 * P.MIN_STEPS):
        q.record(ReadStep(False, 10, P.MIN_SECONDS / (100 * P.MIN_STEPS)))
    assert q.phase == "first"
    assert not q.windows[False]
    r = ReadModePolicy()  # long steps, but fewer than EXPLORE_STEPS: no window yet
    for _ in range(P.FIRST_SKIP_STEPS):
        r.record(ReadStep(False, 1, 0.0))
    for _ in range(P.EXPLORE_STEPS - 1):
        r.record(ReadStep(False, 10, 10 * P.MIN_SECONDS))
    assert not r.windows[False]
    r.record(ReadStep(False, 10, 10 * P.MIN_SECONDS))
    assert len(r.windows[False]) == 1


def test_probes_back_off_and_switch_only_by_a_margin():
    p = _explored(1000.0, 3000.0)
    assert not p.read_ahead
    windows_to_probe = []
    # The other mode is never faster: probes come after 8, 16, 32, 64 times the other mode's
    # last stint (here: windows, all as long as a probe's; the first stint was one window).
    for _ in range(4):
        windows_to_probe.append(_windows_until_switch(p, 3000.0))
        _window(p, 3000.0 * P.SWITCH_MARGIN * 0.95, skip=P.SKIP_STEPS)  # not by the margin
        assert not p.read_ahead and p.phase == "keep"
    first = P.FIRST_BACKOFF * P.EXPLORE_STEPS // P.MIN_STEPS
    assert windows_to_probe == [first] + [P.FIRST_BACKOFF * 2**k for k in range(1, 4)]
    _windows_until_switch(p, 3000.0)
    _window(p, 3000.0 * P.SWITCH_MARGIN * 1.05, skip=P.SKIP_STEPS)
    assert p.read_ahead and p.phase == "keep"
    n = 0
    while p.read_ahead:  # a switch resets the back-off
        _window(p, 3000.0 * P.SWITCH_MARGIN * 1.05)
        n += 1
    assert n == P.FIRST_BACKOFF


def test_probing_costs_a_share_of_the_time_however_long_windows_take():
    """Windows of the other mode 4x as long as the kept mode's (bigger chunks, say) are followed
    by 4x as many kept windows: the share of time spent probing does not depend on window sizes.
    (The first probe is paced by the other mode's whole first stint: FIRST_WINDOWS windows.)"""
    p = ReadModePolicy()
    _first_windows(p, 1000.0, step=4 * STEP)
    _window(p, 3000.0, skip=P.SKIP_STEPS)
    assert p.read_ahead and p.phase == "keep"
    # (exploring windows have EXPLORE_STEPS steps, kept ones MIN_STEPS)
    expected = P.FIRST_WINDOWS * 4 * P.FIRST_BACKOFF * P.EXPLORE_STEPS // P.MIN_STEPS
    assert _windows_until_switch(p, 3000.0, skip=0) == expected


def test_backoff_is_capped():
    p = _explored(1000.0, 3000.0)
    for _ in range(12):
        n = _windows_until_switch(p, 3000.0)
        _window(p, 1000.0, skip=P.SKIP_STEPS)
    assert n == P.MAX_BACKOFF


def test_a_sharp_drop_probes_at_once():
    p = _explored(1000.0, 3000.0)
    _window(p, 3000.0, skip=P.SKIP_STEPS)  # (back from reading ahead: steps to skip)
    assert not p.read_ahead
    _window(p, 3000.0 * P.DROP_FACTOR * 0.9)  # reads turned expensive
    assert p.read_ahead and p.phase == "probe"
    _window(p, 6000.0, skip=P.SKIP_STEPS)
    assert p.read_ahead and p.phase == "keep"


def test_one_slowed_window_does_not_make_it_switch():
    p = _explored(1000.0, 3000.0)
    _window(p, 3000.0, skip=P.SKIP_STEPS)
    _window(p, 300.0)  # the machine was busy for a moment: probe at once ...
    assert p.read_ahead
    _window(p, 1200.0, skip=P.SKIP_STEPS)  # ... against the best recent window, not the slow one
    assert not p.read_ahead and p.phase == "keep"


def test_start_reading_ahead_only_before_any_step():
    p = ReadModePolicy()
    p.start_reading_ahead()
    assert p.read_ahead
    q = ReadModePolicy()
    q.record(ReadStep(False, 1, 0.001))
    q.start_reading_ahead()
    assert not q.read_ahead


# --- the iterator under scripted decisions -----------------------------------------------------


class ScriptedPolicy:
    """Reads ahead, on demand or inline as ``script(k)`` says (``"ahead"``, ``"on demand"``,
    ``"inline"``), ``k`` counting the steps made in the mode chosen at the time (chunks read ahead
    before a switch, still being consumed, do not count); records every step it is given."""

    def __init__(self, script):
        self.script = script
        self.steps: list[ReadStep] = []
        self._k = 0
        self._set(script(0))

    def _set(self, mode: str) -> None:
        assert mode in ("ahead", "on demand", "inline")
        self.read_ahead, self.inline = mode == "ahead", mode == "inline"

    def start_reading_ahead(self) -> None:
        pass

    def record(self, step: ReadStep) -> None:
        self.steps.append(step)
        if step.read_ahead == self.read_ahead:
            self._k += 1
            self._set(self.script(self._k))


MODES = ("ahead", "on demand", "inline")
SCRIPTS = {
    "ahead": lambda k: "ahead",
    "on demand": lambda k: "on demand",
    "inline": lambda k: "inline",
    "flip every 3": lambda k: MODES[(k // 3) % 3],
    "flip every step": lambda k: MODES[(k + 1) % 3],
    "ahead / on demand": lambda k: MODES[k % 2],  # never inline
    "random": lambda k: MODES[int(np.random.default_rng(k).integers(3))],
}


def _scripted(it, script) -> ScriptedPolicy:
    found = [n for n in iterator_tree(it) if hasattr(n, "_policy")]
    assert len(found) == 1
    found[0]._policy = policy = ScriptedPolicy(script)
    return policy


def _pipeline(options, n=4000):
    return (
        grain.MapDataset.range(n)
        .map(lambda x: x + 1 if x % 7 else None)  # Nones are skipped by to_iter_dataset
        .to_iter_dataset(options)
        .map(lambda x: x * 2)
        .filter(lambda x: x % 3 != 0)
        .batch(4)
    )


OPTIONS = [
    grain.ReadOptions(num_threads=3, prefetch_buffer_size=9),
    grain.ReadOptions(num_threads=2, prefetch_buffer_size=1),
    grain.ReadOptions(),
]


def _as_lists(xs):
    return [x.tolist() for x in xs]


@pytest.mark.parametrize("options", OPTIONS, ids=repr)
@pytest.mark.parametrize("script", SCRIPTS, ids=str)
def test_output_and_states_are_exact_in_both_modes_and_across_switches(options, script):
    expected = _as_lists(_pipeline(options))
    it = iter(_pipeline(options))
    policy = _scripted(it, SCRIPTS[script])
    got, states = [], []
    sizes = [1, 3, 64, 2]
    try:
        for k in range(100_000):
            if k % 2:
                got += _as_lists([next(it)])
            else:
                got += _as_lists(it.next_chunk(sizes[k % len(sizes)]))
            states.append((len(got), it.get_state()))
    except StopIteration:
        pass
    assert got == expected
    modes = {s.read_ahead for s in policy.steps if s.elements}
    single = {"ahead": {True}, "on demand": {False}, "inline": {False}}
    assert modes == single.get(script, {True, False})
    for pos, state in states[:: max(1, len(states) // 30)]:
        fresh = iter(_pipeline(options))
        _scripted(fresh, SCRIPTS[script])
        fresh.set_state(state)
        assert _as_lists(fresh) == expected[pos:]
        fresh.close()


@pytest.mark.parametrize("buffer", [1, 5, 16])
@pytest.mark.parametrize("script", SCRIPTS, ids=str)
def test_elements_in_flight_stay_within_the_buffer(buffer, script):
    check_read_ahead_within_buffer(buffer, lambda it: _scripted(it, SCRIPTS[script]))


def test_on_demand_reads_nothing_ahead_and_reads_in_the_pool():
    """On demand, the last read is always the chunk being consumed (nothing beyond it was asked
    for), and a pool thread reads it (after the first element, which the caller reads)."""
    src = CountingSource(3000)
    it = iter(grain.MapDataset.source(src).to_iter_dataset(grain.ReadOptions()))
    _scripted(it, SCRIPTS["on demand"])
    for i in range(3000):
        assert next(it) == i
        last = src.calls[-1]
        assert last[0] <= i <= last[-1]
    assert (src.calls[0], src.readers[0]) == ([0], threading.main_thread().name)
    assert all(name.startswith("grain_core-read") for name in src.readers[1:])
    assert max(len(idx) for idx in src.calls) > 1  # chunks, not single elements
    it.close()


def test_inline_reads_nothing_ahead_in_the_calling_thread():
    """Inline, the consumer reads each chunk itself when it needs it: nothing beyond the chunk
    being consumed is read, every read is made by the calling thread, in chunks, and no read
    thread is started."""
    before = {t.ident for t in threading.enumerate()}
    src = CountingSource(3000)
    it = iter(grain.MapDataset.source(src).to_iter_dataset(grain.ReadOptions()))
    _scripted(it, SCRIPTS["inline"])
    for i in range(3000):
        assert next(it) == i
        last = src.calls[-1]
        assert last[0] <= i <= last[-1]
    assert set(src.readers) == {threading.current_thread().name}
    assert max(len(idx) for idx in src.calls) > 1
    assert max(len(idx) for idx in src.calls) <= grain.ReadOptions().prefetch_buffer_size
    assert not [t for t in threading.enumerate() if t.ident not in before]
    it.close()


def test_reading_ahead_reads_ahead():
    src = CountingSource(3000)
    it = iter(grain.MapDataset.source(src).to_iter_dataset(grain.ReadOptions()))
    _scripted(it, SCRIPTS["ahead"])
    ahead = 0
    for i in range(3000):
        assert next(it) == i
        ahead = max(ahead, src.max_stop - (i + 1))
    assert ahead > 0
    it.close()


@pytest.mark.parametrize("script", ["on demand", "ahead / on demand"])
def test_slow_element_does_not_hold_back_finished_earlier_ones(script):
    """As tests/test_chunks.py's test of the same name, with the policy reading on demand (a
    chunk read inline is one ``__getitems__`` call of the consumer: see the inline tests)."""
    check_slow_element_does_not_hold_back(lambda it: _scripted(it, SCRIPTS[script]))


def _work(x):
    a = np.arange(200, dtype=np.float64) + x
    for _ in range(5):
        a = np.sqrt(a * a + 1.0)
    return int(x)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", ["on demand", "inline", "flip every 3", "random"])
def test_real_interrupts_lose_nothing_across_switches(script):
    """Ctrl-C landing anywhere in grain_core's code in the consumer (the read path, the stages
    above it), in both modes and across switches: continuing the same iterator gives exactly the
    elements of an uninterrupted run, and the final state is exact."""
    n = 3000
    ds = (
        grain.MapDataset.range(n)
        .map(_work)
        .to_iter_dataset(grain.ReadOptions())
        .map(lambda x: x + 1)
        .filter(lambda x: x % 5 != 0)
        .batch(3)
    )
    it = iter(ds)
    _scripted(it, SCRIPTS[script])
    try:
        out, raised = drain_with_interrupts(it)
        state = it.get_state()
    finally:
        it.close()
    assert raised > 0
    assert [x for b in out for x in b.tolist()] == [x + 1 for x in range(n) if (x + 1) % 5 != 0]
    fresh = iter(ds)
    fresh.set_state(state)
    assert list(fresh) == []
    fresh.close()


@pytest.mark.parametrize("script", ["on demand", "flip every 3"])
def test_close_stops_the_read_threads(script):
    # Thread objects, not idents: an earlier test's thread that ends meanwhile may hand its
    # ident to one of this pool's threads.
    before = set(threading.enumerate())
    it = iter(grain.MapDataset.range(5000).to_iter_dataset(grain.ReadOptions(num_threads=4)))
    _scripted(it, SCRIPTS[script])
    # Reads counted as waits: the pool keeps its threads whatever this host's load makes a
    # range read look like (a CPU-bound verdict may leave a loaded 1-CPU share reading inline).
    (node,) = [n for n in iterator_tree(it) if hasattr(n, "_verdict")]
    node._verdict = FixedVerdict(False)
    for _ in range(2000):
        next(it)
    ours = [
        t
        for t in threading.enumerate()
        if t not in before and t.name.startswith("grain_core-read")
    ]
    assert ours
    it.close()
    for t in ours:
        t.join(timeout=60)
    assert not [t for t in ours if t.is_alive()]


def test_the_policy_is_kept_across_restores():
    """A restore restarts reading (cold, first element by the caller) but keeps what the policy
    learnt about the pipeline."""
    it = iter(grain.MapDataset.range(100).to_iter_dataset(grain.ReadOptions()))
    policy = _scripted(it, SCRIPTS["on demand"])
    assert [next(it) for _ in range(10)] == list(range(10))
    state = it.get_state()
    next(it)
    it.set_state(state)
    assert list(it) == list(range(10, 100))
    assert it._policy is policy
    it.close()


def _restored_reading_ahead(n: int) -> tuple[Any, dict[int, str]]:
    """An iterator over ``range(n)`` whose policy reads ahead, restored at position 20 after
    reading there (partly in the pool), and the thread that reads each element from then on."""
    readers: dict[int, str] = {}

    def record(x):
        readers[x] = threading.current_thread().name
        return x

    it = iter(grain.MapDataset.range(n).map(record).to_iter_dataset(grain.ReadOptions()))
    _scripted(it, SCRIPTS["ahead"])
    assert [next(it) for _ in range(20)] == list(range(20))
    assert any(name != threading.current_thread().name for name in readers.values())
    it.set_state(it.get_state())
    readers.clear()
    return it, readers


def test_after_a_restore_the_caller_reads_the_chunk_it_asks_for(monkeypatch):
    """The first chunk after a (re)start is read by the calling thread, as many elements as
    ``next_chunk`` asks for (a worker skipping to a restored position asks for all it skips),
    even while the policy reads ahead; reading ahead resumes after it (here at once: the caller's
    further chunks after a restore are tested below)."""
    monkeypatch.setattr(prefetch, "_RESTORE_INLINE_SECONDS", 0.0)
    it, readers = _restored_reading_ahead(500)
    assert it.next_chunk(7) == list(range(20, 27))
    main = threading.current_thread().name
    assert [readers[i] for i in range(20, 27)] == [main] * 7
    assert list(it) == list(range(27, 500))
    assert any(readers[i] != main for i in range(27, 500))  # read ahead in the pool again
    it.close()


@pytest.mark.parametrize("inline_seconds", [0.0, 1e9])
def test_after_a_restore_the_caller_reads_chunks_until_they_took_long_enough(
    monkeypatch, inline_seconds
):
    """After ``set_state`` the caller goes on reading chunks itself until reading them has taken
    ``_RESTORE_INLINE_SECONDS`` (no threads computing elements a restore soon after would drop);
    a fresh iterator reads only its first chunk so. Reading (and the state) stays exact."""
    monkeypatch.setattr(prefetch, "_RESTORE_INLINE_SECONDS", inline_seconds)
    it, readers = _restored_reading_ahead(300)
    assert list(it) == list(range(20, 300))
    in_caller = [readers[i] == threading.current_thread().name for i in range(20, 300)]
    assert all(in_caller) == (inline_seconds > 0)
    it.close()
