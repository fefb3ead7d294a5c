"""The consumer's run (``RoundRobinConsumer._start_run``): when every worker has a message buffered,
``next()`` serves the elements up to the next credit from one list, before the thread guard, and
folds them into the cursor (``_settle``) only when a state, a chunk or a slow step needs it.

The first tests drive consumers whose workers' messages are laid out by the test (no processes,
nothing depends on timing): the same messages through the run and through the per-element path
(runs switched off) give the same elements, the same states at every point, the same credits at
the same elements, and the same rollbacks. The last ones check the same through real workers."""

from __future__ import annotations

import random

import pytest

import grain_core as grain
from grain_core.runtime import consumer as consumer_mod
from grain_core.runtime import cursor as cursor_mod
from grain_core.runtime.messages import Consumed, Elements, Mark

pytestmark = pytest.mark.timeout(300)


class _Channel:
    """Records what the consumer sends (the credits); never has a message to give."""

    def __init__(self, sent: list, index: int):
        self.sent, self.index = sent, index

    def send(self, msg) -> None:
        self.sent.append((self.index, msg))

    def peek(self, timeout: float) -> None:
        return None  # every message is buffered already (the worker's End too)


def _consumer(layout, buffer: int, *, runs: bool):
    """A started consumer over ``layout``: per worker, the sizes of the messages it delivered (all
    buffered, then its End). Elements are ``(worker, number)``; every third element is marked."""
    k = len(layout)
    c = object.__new__(consumer_mod.RoundRobinConsumer)
    consumer_mod.DatasetIterator.__init__(c)
    sent: list = []
    c._channels = [_Channel(sent, i) for i in range(k)]
    c._k = k
    c._closed = False
    c._finalizer = lambda: None  # no workers to stop
    c._started = True
    c._error = None
    c._prev = None
    c._run, c._run_pos, c._run_stop = [], 0, 0
    c._credited = [0] * k
    c._buffer_size = buffer
    c._credit_step = max(1, buffer // 2)
    workers = []
    for i, sizes in enumerate(layout):
        msgs, n = [], 0
        for seq, size in enumerate(sizes, 1):
            elements = [(i, n + e) for e in range(size)]
            marks = tuple(Mark(o, f"w{i}@{n + o}") for o in range(1, size) if (n + o) % 3 == 0)
            msgs.append(Elements(seq, 0, f"w{i}@{n}", 0, elements, marks))
            n += size
        workers.append(cursor_mod.WorkerView(buffered=tuple(msgs), ended=True, seq=len(sizes)))
    c._cursor = cursor_mod.Cursor(0, 0, 0, tuple(workers))
    if not runs:
        c._start_run = lambda: False
    return c, sent


def _layouts():
    rng = random.Random(7)
    out = [
        [[8, 8], [8, 8]],
        [[1, 2, 40], [30, 1, 1, 9]],
        [[100], [3, 97], [50, 50]],
        [[256, 256]],
        [[40, 40], [40, 40], [41]],
    ]
    for _ in range(6):
        k = rng.choice([2, 3, 4])
        out.append([[rng.randint(1, 60) for _ in range(rng.randint(1, 5))] for _ in range(k)])
    return out


@pytest.mark.parametrize("buffer", [1, 3, 64])
@pytest.mark.parametrize("layout", _layouts())
def test_runs_give_the_per_element_elements_states_and_credits(layout, buffer):
    ref, ref_sent = _consumer(layout, buffer, runs=False)
    expected, states, credits_before = [], [ref.get_state()], [0]
    for x in ref:
        expected.append(x)
        states.append(ref.get_state())
        credits_before.append(len(ref_sent))
    assert len(expected) == sum(map(sum, layout))

    rng = random.Random(len(expected) * 31 + buffer)
    c, sent = _consumer(layout, buffer, runs=True)
    out, from_runs = [], 0
    while True:
        for _ in range(rng.randint(1, 9)):  # a state every 1..9 elements: any point of a run
            from_runs += c._run_pos < c._run_stop
            try:
                out.append(next(c))
            except StopIteration:
                break
            assert len(sent) == credits_before[len(out)], len(out)  # the same credit, same element
        else:
            assert c.get_state() == states[len(out)], len(out)
            continue
        break
    assert out == expected
    assert sent == ref_sent
    assert all(isinstance(m, Consumed) for _, m in sent)
    assert c.get_state() == states[-1]
    if min(min(sizes) for sizes in layout) > 4 * (buffer + 2):  # long messages at every worker
        assert from_runs > 0


def _expected_and_consumer(layout, buffer: int):
    """The per-element path's elements over ``layout``, and a fresh consumer with runs."""
    ref, _ = _consumer(layout, buffer, runs=False)
    return list(ref), _consumer(layout, buffer, runs=True)[0]


@pytest.mark.parametrize("layout", _layouts()[:4])
def test_a_rollback_inside_a_run_returns_the_element_again(layout):
    expected, c = _expected_and_consumer(layout, 1)
    out, rolled_in_run = [], 0
    while True:
        mark = c.rollback_mark()
        try:
            x = next(c)
        except StopIteration:
            break
        if len(out) % 4 == 1:  # as if Ctrl-C had hit the caller before it got x
            rolled_in_run += c._run_stop > 0
            c.rollback(mark)
            assert next(c) == x
        out.append(x)
    assert out == expected
    assert rolled_in_run > 0


@pytest.mark.parametrize("layout", _layouts()[:4])
def test_next_chunk_after_run_elements(layout):
    expected, c = _expected_and_consumer(layout, 2)
    out, calls = [], 0
    while True:
        calls += 1
        try:
            if calls % 3 == 0:
                out += c.next_chunk(calls % 11 + 2)
            else:
                out.append(next(c))
        except StopIteration:
            break
    assert out == expected


def test_next_after_close_raises_inside_a_run():
    c, _ = _consumer([[50], [50]], 1, runs=True)
    assert [next(c), next(c)] == [(0, 0), (1, 0)]
    assert c._run_pos < c._run_stop  # elements of the run are left
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(c)


# --- through real workers -------------------------------------------------------------------------

N = 601


def _ds(workers: int, buffer: int):
    return (
        grain.MapDataset.range(N)
        .map(lambda x: x * 3)
        .to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer))
    )


@pytest.mark.parametrize("workers,buffer", [(2, 1), (3, 64)])
def test_states_taken_every_few_elements_restore_exactly(workers, buffer):
    ds = _ds(workers, buffer)
    expected = [x * 3 for x in range(N)]
    states = {}
    with iter(ds) as it:
        out, step = [], 1
        while len(out) < N:
            for _ in range(min(step, N - len(out))):
                out.append(next(it))
            states[len(out)] = it.get_state()
            step = step % 7 + 1
    assert out == expected
    with iter(ds) as it2:
        for p in list(states)[::11] + [N]:
            it2.set_state(states[p])
            assert list(it2) == expected[p:], p
