"""Ctrl-C inside ``next()`` and then continuing the same iterator (the notebook habit) loses and
repeats nothing: for ``mp_prefetch``, thread prefetch, ``device_put`` and the ``DataLoader``.

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
from grain_core.runtime import processes, thread_prefetch
from grain_core.testing import Injector, drain_with_injected, drain_with_interrupts

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
        with Injector(thread_prefetch._Producer, "head", every=3) as injected:
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
        with Injector(thread_prefetch._Producer, "head", every=3) as injected:
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
