"""Ctrl-C inside ``next()`` and then continuing the same iterator (the notebook habit) loses and
repeats nothing: for ``mp_prefetch``, thread prefetch, ``device_put``, the ``DataLoader``, and the
stages running in the caller's thread (map, filter, random_map, map_with_index, batch), where the
interrupt lands inside the user's function.

Two ways of raising into ``next()``: a real ``SIGALRM`` timer whose handler raises
``KeyboardInterrupt`` wherever the main thread is inside grain_core code (once per ``next()`` call,
as a person pressing Ctrl-C would), and exceptions injected at the blocking points (where a real
Ctrl-C lands while the consumer waits). No assertion depends on timing: each test compares the
elements with the uninterrupted list.
"""

from __future__ import annotations

import signal
import sys

import numpy as np
import pytest

import grain_core as grain
from grain_core.runtime import processes, read_ahead
from grain_core.testing import Injector, Interrupter, drain_with_injected, drain_with_interrupts

pytestmark = pytest.mark.timeout(300)


def _work(x):
    a = np.arange(200, dtype=np.float64) + x
    for _ in range(5):
        a = np.sqrt(a * a + 1.0)
    return int(x)


def _ds(n):
    return grain.MapDataset.range(n).map(_work).to_iter_dataset()


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
@pytest.mark.parametrize("buffer", [1, 8])
def test_mp_prefetch_survives_real_interrupts(buffer):
    n = 1500
    ds = _ds(n).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=buffer)
    )
    with iter(ds) as it:
        out, raised = drain_with_interrupts(it)
        state = it.get_state()
    assert raised > 0
    assert out == list(range(n))
    with iter(ds) as it:  # and the state after all that is exact
        it.set_state(state)
        assert list(it) == []


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_thread_prefetch_survives_real_interrupts():
    n = 3000
    ds = grain.experimental.ThreadPrefetchIterDataset(_ds(n), prefetch_buffer_size=3)
    it = iter(ds)
    try:
        out, raised = drain_with_interrupts(it)
    finally:
        it.close()
    assert raised > 0
    assert out == list(range(n))


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_dataloader_survives_real_interrupts():
    n = 600
    loader = grain.DataLoader(
        data_source=grain.sources.RangeDataSource(0, n, 1),
        sampler=grain.samplers.IndexSampler(n, shard_options=grain.sharding.NoSharding(),
                                            shuffle=False, num_epochs=1),
        operations=[],
        worker_count=2,
    )
    it = iter(loader)
    out, raised = drain_with_interrupts(it)
    assert raised > 0
    assert [int(x) for x in out] == list(range(n))


def test_mp_prefetch_with_interrupts_at_the_blocking_point():
    n = 400
    ds = _ds(n).mp_prefetch(grain.MultiprocessingOptions(num_workers=3, per_worker_buffer_size=1))
    with Injector(processes.ProcessPool, "wait_ready", every=2) as injected, iter(ds) as it:
        assert drain_with_injected(it, injected) == list(range(n))


def test_dataloader_with_interrupts_at_the_blocking_point():
    n = 300
    loader = grain.DataLoader(
        data_source=grain.sources.RangeDataSource(0, n, 1),
        sampler=grain.samplers.IndexSampler(n, shard_options=grain.sharding.NoSharding(),
                                            shuffle=False, num_epochs=1),
        operations=[grain.transforms.Batch(batch_size=7)],
        worker_count=2,
    )
    with Injector(processes.ProcessPool, "wait_ready", every=2) as injected:
        out = drain_with_injected(iter(loader), injected)
    # Grain's order: worker w batches positions w, w + 2, ...; batches come from the workers in turn
    per_worker = [list(range(w, n, 2)) for w in range(2)]
    batches = [[p[i : i + 7] for i in range(0, len(p), 7)] for p in per_worker]
    expected = [b[k] for k in range(max(map(len, batches))) for b in batches if k < len(b)]
    assert [np.asarray(b).tolist() for b in out] == expected


def test_thread_prefetch_with_interrupts_at_the_blocking_point():
    n = 500
    ds = grain.experimental.ThreadPrefetchIterDataset(_ds(n), prefetch_buffer_size=2)
    it = iter(ds)
    try:
        with Injector(read_ahead.ReadAhead, "peek", every=3) as injected:
            assert drain_with_injected(it, injected) == list(range(n))
    finally:
        it.close()


def test_device_put_with_interrupts_at_the_blocking_point():
    jax = pytest.importorskip("jax")
    n = 200
    ds = grain.experimental.device_put(_ds(n), jax.devices()[0], cpu_buffer_size=3,
                                       device_buffer_size=2)
    it = iter(ds)
    try:
        with Injector(read_ahead.ReadAhead, "peek", every=3) as injected:
            out = drain_with_injected(it, injected)
        state = it.get_state()
    finally:
        it.close()
    assert [int(x) for x in out] == list(range(n))
    it = iter(ds)
    try:
        it.set_state(state)
        assert list(it) == []
    finally:
        it.close()


if sys.platform == "win32":  # pragma: no cover
    pytest.skip("POSIX signals", allow_module_level=True)


# --- stages running in the caller's thread: the interrupt lands inside the user's function ---------

_HERE = sys.modules[__name__]  # interrupts also land in this file's functions (the user code)


def _slow(x):
    a = np.arange(300, dtype=np.float64) + x
    for _ in range(4):
        a = np.sqrt(a * a + 1.0)
    return int(x)


def _slow_pred(x):
    return _slow(x) % 3 != 1


def _slow_random(x, rng):
    return _slow(x) * 1000 + int(rng.integers(0, 1000))


def _slow_with_index(i, x):
    return (i, _slow(x))


def _slow_batch_fn(xs):
    return [_slow(x) for x in xs]


class _SlowSplit(grain.transforms.FlatMap):
    max_fan_out = 3

    def flat_map(self, x):
        return [_slow(x)] * (x % 3)


_RO0 = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _in_caller_pipelines():
    """(name, factory) of pipelines whose last stages run in the caller's thread, over parents that
    can move back (kernel stages) and over parents that cannot (batch, thread prefetch)."""
    src = lambda n: grain.MapDataset.range(n).to_iter_dataset(_RO0)  # noqa: E731
    thread = lambda n: grain.experimental.ThreadPrefetchIterDataset(src(n), prefetch_buffer_size=4)  # noqa: E731
    return {
        "map": lambda: src(400).map(_slow),
        "map_after_batch": lambda: src(600).batch(3).map(lambda b: [_slow(x) for x in b]),
        "map_after_thread_prefetch": lambda: thread(400).map(_slow),
        "filter": lambda: src(400).filter(_slow_pred),
        "filter_after_thread_prefetch": lambda: thread(400).filter(_slow_pred),
        "random_map": lambda: src(400).seed(3).random_map(_slow_random),
        "map_with_index": lambda: src(400).map_with_index(_slow_with_index),
        "map_filter_batch": lambda: src(600).map(_slow).filter(_slow_pred).batch(4),
        "batch_fn": lambda: src(600).batch(5, batch_fn=_slow_batch_fn),
        "flat_map": lambda: grain.experimental.FlatMapIterDataset(src(300), _SlowSplit()),
        "flat_map_after_thread_prefetch": lambda: grain.experimental.FlatMapIterDataset(
            thread(300), _SlowSplit()
        ),
    }


def _plain(x):
    return x.tolist() if isinstance(x, np.ndarray) else x


def _drain_interrupted(it, read_chunks, every=None):
    """Reads ``it`` to its end under real interrupts (in grain_core and in this file's user
    functions); returns the elements and (position, state) pairs: taken right after interrupts,
    or, with ``every``, after every ``every``-th call (``get_state()`` itself interrupted and
    retried). (No lambdas: the interrupter would interrupt them, losing what ``next`` returned.)"""
    out, states, calls = [], [], 0
    with Interrupter(packages=(grain, _HERE), exclude=(_drain_interrupted,)) as intr:
        while True:
            intr.armed = True
            try:
                got = it.next_chunk(7) if read_chunks else [next(it)]
            except KeyboardInterrupt:
                intr.armed = False
                if every is None:
                    states.append((len(out), it.get_state()))
                continue
            except StopIteration:
                break
            finally:
                intr.armed = False
            out += got
            calls += 1
            while every is not None and calls % every == 0:
                intr.armed = True
                try:
                    state = it.get_state()
                except KeyboardInterrupt:
                    continue
                finally:
                    intr.armed = False
                states.append((len(out), state))
                break
    assert intr.raised > 0
    return [_plain(x) for x in out], states


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
@pytest.mark.parametrize("read_chunks", [False, True], ids=["next", "next_chunk"])
@pytest.mark.parametrize("name", sorted(_in_caller_pipelines()))
def test_in_caller_stages_keep_the_interrupted_element(name, read_chunks):
    make = _in_caller_pipelines()[name]
    expected = [_plain(x) for x in make()]
    it = iter(make())
    try:
        out, states = _drain_interrupted(it, read_chunks)
    finally:
        it.close()
    assert out == expected
    for pos, state in states[:: max(1, len(states) // 5)]:  # states taken after interrupts
        again = iter(make())
        try:
            again.set_state(state)
            assert [_plain(x) for x in again] == expected[pos:]
        finally:
            again.close()


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
@pytest.mark.parametrize("read_chunks", [False, True], ids=["next", "next_chunk"])
@pytest.mark.parametrize("every", [1, 4])
@pytest.mark.parametrize("batched", [False, True], ids=["filter", "filter_batch"])
def test_filter_read_ahead_given_back_by_states_under_interrupts(read_chunks, every, batched):
    """``filter`` keeps what it read ahead and gives it back to its input in ``get_state()``:
    with states taken often and real interrupts anywhere (in the user's functions, in grain_core,
    inside ``get_state`` itself), the elements are exactly those of an uninterrupted run and every
    state restores to exactly the rest."""

    def make():
        ds = grain.MapDataset.range(500).to_iter_dataset(_RO0).map(_slow).filter(_slow_pred)
        return ds.batch(3) if batched else ds

    expected = [_plain(x) for x in make()]
    it = iter(make())
    out, states = _drain_interrupted(it, read_chunks, every)
    assert out == expected
    for pos, state in states[:: max(1, len(states) // 6)]:
        again = iter(make())
        again.set_state(state)
        assert [_plain(x) for x in again] == expected[pos:]


def test_an_exception_in_the_users_function_consumes_its_element():
    """Grain's behaviour, kept: an ordinary exception propagates and its element is consumed;
    the iterator goes on with the next one (only interrupts keep the element pending)."""

    def fail_on_3(x):
        if x == 3:
            raise ValueError("bad 3")
        return x

    for parent in (
        grain.MapDataset.range(8).to_iter_dataset(_RO0),
        grain.experimental.ThreadPrefetchIterDataset(
            grain.MapDataset.range(8).to_iter_dataset(_RO0), prefetch_buffer_size=2
        ),
    ):
        it = iter(parent.map(fail_on_3))
        out = [next(it) for _ in range(3)]
        with pytest.raises(ValueError, match="bad 3"):
            next(it)
        out += list(it)
        assert out == [0, 1, 2, 4, 5, 6, 7]
