"""Ctrl-C inside ``next()`` and then continuing the same iterator (the notebook habit) loses and
repeats nothing: for ``mp_prefetch``, thread prefetch, ``device_put`` and the ``DataLoader``.

Two ways of raising into ``next()``: a real ``SIGALRM`` timer whose handler raises
``KeyboardInterrupt`` wherever the main thread is inside grain_core code (once per ``next()`` call,
as a person pressing Ctrl-C would), and exceptions injected at the blocking points (where a real
Ctrl-C lands while the consumer waits). No assertion depends on timing: each test compares the
elements with the uninterrupted list.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
import pytest

import grain_core as grain
from grain_core.runtime import processes, thread_prefetch

pytestmark = pytest.mark.timeout(300)

_GRAIN_DIR = os.path.dirname(grain.__file__) + os.sep


def _work(x):
    a = np.arange(200, dtype=np.float64) + x
    for _ in range(5):
        a = np.sqrt(a * a + 1.0)
    return int(x)


def _ds(n):
    return grain.MapDataset.range(n).map(_work).to_iter_dataset()


class _Interrupter:
    """A real interval timer whose handler raises KeyboardInterrupt when the main thread is in
    grain_core code, at most once per armed ``next()`` call."""

    def __init__(self, interval=0.0003):
        self.interval = interval
        self.armed = False
        self.raised = 0

    def _handler(self, signum, frame):
        if self.armed and frame is not None and frame.f_code.co_filename.startswith(_GRAIN_DIR):
            self.armed = False
            self.raised += 1
            raise KeyboardInterrupt

    def __enter__(self):
        self.old = signal.signal(signal.SIGALRM, self._handler)
        signal.setitimer(signal.ITIMER_REAL, self.interval, self.interval)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, self.old)


def _drain_with_signals(it):
    out = []
    with _Interrupter() as intr:
        while True:
            intr.armed = True
            try:
                x = next(it)
            except KeyboardInterrupt:
                continue
            except StopIteration:
                break
            finally:
                intr.armed = False
            out.append(x)
    return out, intr.raised


def _drain_with_injected(it, interrupts):
    out = []
    while True:
        try:
            x = next(it)
        except KeyboardInterrupt:
            continue
        except StopIteration:
            break
        out.append(x)
    assert interrupts.count > 0
    return out


class _Injector:
    """Wraps a blocking function: every ``every``-th call raises KeyboardInterrupt first."""

    def __init__(self, monkeypatch, owner, name, every=3):
        self.count = 0
        self.calls = 0
        orig = getattr(owner, name)

        def wrapper(*args, **kwargs):
            self.calls += 1
            if self.calls % every == 0:
                self.count += 1
                raise KeyboardInterrupt
            return orig(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
@pytest.mark.parametrize("buffer", [1, 8])
def test_mp_prefetch_survives_real_interrupts(buffer):
    n = 1500
    ds = _ds(n).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=buffer)
    )
    with iter(ds) as it:
        out, raised = _drain_with_signals(it)
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
        out, raised = _drain_with_signals(it)
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
    out, raised = _drain_with_signals(it)
    assert raised > 0
    assert [int(x) for x in out] == list(range(n))


def test_mp_prefetch_with_interrupts_at_the_blocking_point(monkeypatch):
    injected = _Injector(monkeypatch, processes.ProcessPool, "wait_ready", every=2)
    n = 400
    ds = _ds(n).mp_prefetch(grain.MultiprocessingOptions(num_workers=3, per_worker_buffer_size=1))
    with iter(ds) as it:
        assert _drain_with_injected(it, injected) == list(range(n))


def test_dataloader_with_interrupts_at_the_blocking_point(monkeypatch):
    injected = _Injector(monkeypatch, processes.ProcessPool, "wait_ready", every=2)
    n = 300
    loader = grain.DataLoader(
        data_source=grain.sources.RangeDataSource(0, n, 1),
        sampler=grain.samplers.IndexSampler(n, shard_options=grain.sharding.NoSharding(),
                                            shuffle=False, num_epochs=1),
        operations=[grain.transforms.Batch(batch_size=7)],
        worker_count=2,
    )
    out = _drain_with_injected(iter(loader), injected)
    # Grain's order: worker w batches positions w, w + 2, ...; batches come from the workers in turn
    per_worker = [list(range(w, n, 2)) for w in range(2)]
    batches = [[p[i : i + 7] for i in range(0, len(p), 7)] for p in per_worker]
    expected = [b[k] for k in range(max(map(len, batches))) for b in batches if k < len(b)]
    assert [np.asarray(b).tolist() for b in out] == expected


def test_thread_prefetch_with_interrupts_at_the_blocking_point(monkeypatch):
    injected = _Injector(monkeypatch, thread_prefetch._Producer, "head", every=3)
    n = 500
    ds = grain.experimental.ThreadPrefetchIterDataset(_ds(n), prefetch_buffer_size=2)
    it = iter(ds)
    try:
        assert _drain_with_injected(it, injected) == list(range(n))
    finally:
        it.close()


def test_device_put_with_interrupts_at_the_blocking_point(monkeypatch):
    jax = pytest.importorskip("jax")
    injected = _Injector(monkeypatch, thread_prefetch._Producer, "head", every=3)
    n = 200
    ds = grain.experimental.device_put(_ds(n), jax.devices()[0], cpu_buffer_size=3,
                                       device_buffer_size=2)
    it = iter(ds)
    try:
        out = _drain_with_injected(it, injected)
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
