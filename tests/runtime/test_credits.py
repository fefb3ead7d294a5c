"""Flow control of mp_prefetch: credits, the element bound, and exact state around them.

* Each worker has at most ``per_worker_buffer_size + 1`` elements produced (or being produced) that
  ``next()`` has not returned: the buffer plus the one in production, which is sent as soon as it
  is finished; smaller elements may run ahead while they take under ``api.AHEAD_BYTES``
  (:func:`runtime_helpers.ahead_bound`). Checked per worker after every element, through a side
  channel the workers write; and exactly, on the worker loop alone, with a consumer that never
  returns anything.
* Credits (``Consumed`` counts) travel on a credit pipe written by the consumer's own thread; when
  that pipe is full, the count is left to the I/O thread, which delivers it once there is room:
  no credit is lost, so the worker never waits forever.
* States taken at any point restore exactly, at several buffer sizes.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest
from runtime_helpers import HeldEndpoint, ahead_bound, alive, our_segments

import grain_core as grain
from grain_core.runtime import api

pytestmark = pytest.mark.timeout(120)

MP = grain.MultiprocessingOptions


def _recorder(path, nbytes):
    def produce(x):
        # One short O_APPEND write per element: lines of both workers never interleave.
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {x}\n")
        return np.full((nbytes // 8,), x)  # element x, of exactly `nbytes` bytes

    return produce


def _started(path):
    with open(path) as f:
        return [tuple(int(v) for v in line.split()) for line in f if line.endswith("\n")]


@pytest.mark.parametrize(
    "buffer,nbytes",
    [(1, api.AHEAD_BYTES), (2, api.AHEAD_BYTES), (5, 400_000), (1, 100_000)],
    ids=["buffer1-large", "buffer2-large", "buffer5-medium", "buffer1-small"],
)
def test_each_worker_stays_within_its_bound(tmp_path, buffer, nbytes):
    log = str(tmp_path / "started")
    open(log, "w").close()
    ds = (
        grain.MapDataset.range(400)
        .to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        .map(_recorder(log, nbytes))  # runs in a worker, once per element it starts producing
        .mp_prefetch(MP(num_workers=2, per_worker_buffer_size=buffer))
    )
    bound = ahead_bound(buffer, nbytes)
    returned: list[int] = []
    with iter(ds) as it:
        for n in range(80):
            if n % 10 == 0:
                time.sleep(0.1)  # lets the workers run ahead as far as they may
            returned.append(int(next(it)[0]))
            started = _started(log)
            owner = dict((x, pid) for pid, x in started)
            assert len(set(owner.values())) <= 2
            for pid in set(owner.values()):
                mine = sum(1 for p, _ in started if p == pid)
                given = sum(1 for x in returned if owner[x] == pid)
                assert mine - given <= bound, (n, pid, mine, given, bound)
    assert returned == list(range(80))


def test_a_credit_that_finds_the_credit_pipe_full_is_delivered_later():
    n = 120
    ds = (
        grain.MapDataset.range(n)
        .map(lambda x: {"x": np.full((300,), x), "i": x})
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(MP(num_workers=2, per_worker_buffer_size=1))
    )
    it = iter(ds)
    got = [int(next(it)["i"]) for _ in range(6)]
    pids = it.worker_pids
    ch = it.pool.channels[1]
    os.kill(pids[1], signal.SIGSTOP)
    try:
        # Fill worker 1's credit pipe with harmless records (generation 0, count 0) until a
        # write finds no room; nothing reads it while the worker is stopped.
        while ch.send(api.Consumed(0, 0)) is None and ch.unsent_credit is None:
            pass
        assert ch.unsent_credit == api.Consumed(0, 0)  # left to the I/O thread, not dropped
    finally:
        os.kill(pids[1], signal.SIGCONT)
    deadline = time.monotonic() + 60  # a hang guard for a loaded machine, not a speed check
    while ch.unsent_credit is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ch.unsent_credit is None  # the I/O thread wrote it once the worker read the pipe
    got += [int(e["i"]) for e in it]
    assert got == list(range(n))  # and the credits the consumer sent meanwhile all arrived
    it.close()
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [p for p in pids if alive(p)]
    assert our_segments() == []


@pytest.mark.parametrize("buffer", [1, 3])
def test_states_restore_exactly_at_small_buffers(buffer):
    ds = (
        grain.MapDataset.range(50)
        .shuffle(seed=7)
        .map(lambda x: {"x": np.full((300,), x), "i": x})
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(MP(num_workers=2, per_worker_buffer_size=buffer))
    )
    expected = [int(x) for x in grain.MapDataset.range(50).shuffle(seed=7)]
    states = {}
    with iter(ds) as it:
        for p in range(51):
            if p in (0, 1, 2, 5, 13, 26, 49, 50):
                states[p] = json.loads(json.dumps(it.get_state()))
            if p < 50:
                assert int(next(it)["i"]) == expected[p]
    for p, state in states.items():
        with iter(ds) as it:
            it.set_state(state)
            assert [int(e["i"]) for e in it] == expected[p:], p


@pytest.mark.parametrize(
    "buffer,nbytes",
    [(1, api.AHEAD_BYTES), (3, api.AHEAD_BYTES), (1, 300_000), (2, 2_400), (600, 2_400)],
)
def test_worker_loop_runs_exactly_to_its_bound(buffer, nbytes):
    """With nothing returned, a worker produces exactly ``buffer + 1`` elements and stops; as
    elements are returned, small ones run further ahead: ``buffer + 1`` plus the elements returned
    so far, up to ``ahead_bound`` (bytes are freed per message returned wholly, so returning all
    it sent frees all)."""
    ds = grain.MapDataset.range(100_000).map(lambda x: np.full((nbytes // 8,), x)).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    )
    job = api.WorkerJob.create(ds, MP(num_workers=1, per_worker_buffer_size=buffer))
    ep = HeldEndpoint()
    loop = api.WorkerLoop(job, 0, ep, size_of=lambda x: x.nbytes)
    thread = threading.Thread(target=loop.run, daemon=True)
    ep.waiting.clear()
    thread.start()
    assert ep.waiting.wait(60)  # the template sent, waiting for Start
    ep.command(api.Start(0, None, 0))
    assert ep.produced() == buffer + 1
    bound = ahead_bound(buffer, nbytes)
    for _ in range(12):
        consumed = ep.produced()  # the consumer returns all it has
        ep.command(api.Consumed(0, consumed))
        assert ep.produced() - consumed == max(buffer + 1, min(bound, buffer + 1 + consumed))
    assert ep.produced() - consumed == bound
    elements = [x for m in ep.sent if isinstance(m, api.Elements) for x in m.elements]
    assert [int(x[0]) for x in elements] == list(range(len(elements)))
    ep.commands.put(api.Stop())
    thread.join(60)
    assert not thread.is_alive()


def test_a_message_takes_at_most_half_the_byte_allowance():
    """A worker's message counts against ``AHEAD_BYTES`` until it is returned wholly, so it takes
    at most half of it (plus the element that crossed the line): the worker produces its next
    message while the consumer returns the last. (A message as large as the whole allowance left
    the worker waiting until the consumer had returned all of it.)"""
    nbytes = 300_000
    ds = grain.MapDataset.range(100_000).map(lambda x: np.full((nbytes // 8,), x)).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    )
    job = api.WorkerJob.create(ds, MP(num_workers=1, per_worker_buffer_size=1))
    ep = HeldEndpoint()
    loop = api.WorkerLoop(job, 0, ep, size_of=lambda x: x.nbytes)
    thread = threading.Thread(target=loop.run, daemon=True)
    ep.waiting.clear()
    thread.start()
    assert ep.waiting.wait(60)
    ep.command(api.Start(0, None, 0))
    for _ in range(12):
        messages = [m for m in ep.sent if isinstance(m, api.Elements)]
        # Everything but the latest message returned: the worker goes on beside it.
        consumed = ep.produced() - len(messages[-1].elements)
        before = ep.produced()
        ep.command(api.Consumed(0, consumed))
        assert ep.produced() > before, "the worker waited for its latest message to be returned"
    sizes = [sum(x.nbytes for x in m.elements) for m in ep.sent if isinstance(m, api.Elements)]
    assert max(sizes) < api.AHEAD_BYTES // 2 + nbytes, sizes
    assert max(sizes) >= api.AHEAD_BYTES // 2, sizes  # and they did grow to it
    ep.commands.put(api.Stop())
    thread.join(60)
    assert not thread.is_alive()


@pytest.mark.parametrize("buffer", [1, 4])
def test_when_the_consumer_credits_a_worker(buffer):
    """``RoundRobinConsumer._credit_due``: a credit goes when a message is returned wholly, every
    half message (or half buffer), and inside the last message received once the rest fits the
    buffer, not for every element before that (a system call and a worker wake-up each that the
    worker's bound cannot use)."""
    from grain_core.runtime.consumer import RoundRobinConsumer

    consumer = object.__new__(RoundRobinConsumer)
    consumer._buffer_size = buffer
    consumer._credit_step = max(1, buffer // 2)
    due = consumer._credit_due
    size = 16
    later = True  # a message was received after this one
    assert due(True, False, 0, 1, size)  # returned wholly
    assert due(True, later, 0, 1, size)
    # Inside the last message received: held back until the rest fits the buffer ...
    assert not due(False, False, buffer + 1, 1, size)
    assert due(False, False, buffer, 1, size)
    # ... unless half the message went uncredited.
    assert due(False, False, size - 8, 8, size)
    assert not due(False, False, size - 7, 7, size)
    # With later messages received: every half message.
    assert not due(False, later, 3, 1, size)
    assert due(False, later, 3, size // 2, size)
