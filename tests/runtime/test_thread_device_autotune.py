"""ThreadPrefetchIterDataset, device_put (4 fake CPU devices) and pick_performance_config."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from runtime_helpers import runtime_threads

import grain_core as grain
from grain_core import experimental

pytestmark = pytest.mark.timeout(60)


def _threads():
    return [t for t in runtime_threads() if t.name == "grain_core-thread-prefetch"]


def test_thread_prefetch_seed_example_and_state():
    ds = grain.MapDataset.range(50).shuffle(seed=1).to_iter_dataset()
    tp = experimental.ThreadPrefetchIterDataset(ds.map(lambda x: x), prefetch_buffer_size=3)
    expected = list(ds)
    it = iter(tp)
    it.start_prefetch()
    assert len(_threads()) == 1
    got = [next(it) for _ in range(10)]
    st = json.loads(json.dumps(it.get_state()))
    got += list(it)
    assert got == expected
    for _ in range(5):  # restoring never leaks threads
        it.set_state(st)
        assert next(it) == expected[10]
        assert len(_threads()) <= 1
    it.close()
    assert _threads() == []
    it2 = iter(tp)
    it2.set_state(st)
    assert list(it2) == expected[10:]
    it2.close()


def test_thread_prefetch_buffer_is_bounded_and_errors_surface():
    produced = []

    def record(x):
        produced.append(x)
        if x == 7:
            raise KeyError("seven")
        return x

    tp = experimental.ThreadPrefetchIterDataset(
        grain.MapDataset.range(20).to_iter_dataset(grain.ReadOptions(num_threads=0)).map(record),
        prefetch_buffer_size=2,
    )
    with iter(tp) as it:
        assert next(it) == 0
        time.sleep(0.2)
        assert len(produced) <= 4  # 1 consumed + 2 buffered + 1 in hand
        assert [next(it) for _ in range(6)] == [1, 2, 3, 4, 5, 6]
        with pytest.raises(KeyError):
            next(it)
    assert _threads() == []
    plain = grain.MapDataset.range(5).to_iter_dataset()
    assert list(experimental.ThreadPrefetchIterDataset(plain, 0)) == list(range(5))


def test_thread_prefetch_producer_survives_the_consumer_removing_the_head():
    # The reading thread counts what it holds while the consumer may drop taken items from the
    # buffer at any moment (seen in a Ray worker under load, when the count read the buffer: the
    # thread died on an IndexError and the consumer reported that the thread had stopped). The
    # count now reads numbers only: a consumer emptying the buffer under it changes nothing.
    import collections

    from grain_core.runtime.read_ahead import ReadAhead

    class RemovedOnRead(collections.deque):
        def __len__(self):
            raise AssertionError("the count read the buffer")

        def __getitem__(self, i):
            raise AssertionError("the count read the buffer")

    ahead = ReadAhead(iter(grain.MapDataset.range(3).to_iter_dataset()), 2)
    r = ahead._reading
    r.buffer, r.seq = RemovedOnRead([(1, "x", 0, None)]), 1
    ahead.mark = (1, None)  # the head was taken: the consumer may drop it meanwhile
    assert r.occupied() == 0
    r.buffer, r.seq = RemovedOnRead([(2, "x", 1, None), (3, "x", 2, None)]), 3
    assert r.occupied() == 2  # never less than what is really held: the bound holds
    ahead.mark = (0, None)  # a give-back moved the mark back: the count can only grow
    assert r.occupied() == 3


def test_thread_prefetch_producer_error_reaches_the_consumer(monkeypatch):
    # Whatever ends the producer thread other than close() or set_state reaches next() as an
    # error at that position, instead of "thread prefetch stopped unexpectedly".
    from grain_core.runtime.read_ahead import _Reading

    ds = experimental.ThreadPrefetchIterDataset(grain.MapDataset.range(5).to_iter_dataset(), 2)
    with iter(ds) as it:
        assert next(it) == 0

        def broken(self):
            raise IndexError("a bug in the producer")

        monkeypatch.setattr(_Reading, "occupied", broken)
        it.set_state(it.get_state())  # restarts the thread on the next call
        with pytest.raises(IndexError, match="a bug in the producer"):
            next(it)


def test_thread_prefetch_garbage_collected():
    import gc

    it = iter(
        experimental.ThreadPrefetchIterDataset(
            grain.MapDataset.range(10**6).to_iter_dataset(), prefetch_buffer_size=4
        )
    )
    next(it)
    del it
    gc.collect()
    deadline = time.monotonic() + 30  # a hang guard for a loaded machine, not a speed check
    while _threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _threads() == []


def test_device_put_named_sharding_seed_004():
    import jax

    devices = jax.devices()
    assert len(devices) == 4
    mesh = jax.sharding.Mesh(np.array(devices), axis_names=("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    ds = (
        grain.MapDataset.range(64)
        .map(lambda x: {"x": np.full((3,), x, np.float32)})
        .batch(8)
        .to_iter_dataset()
    )
    out_ds = experimental.device_put(ds, sharding, cpu_buffer_size=3, device_buffer_size=2)
    it = iter(out_ds)
    first = [next(it) for _ in range(3)]
    st = json.loads(json.dumps(it.get_state()))
    rest = list(it)
    assert len(first) + len(rest) == 8
    b = first[0]["x"]
    assert isinstance(b, jax.Array) and b.sharding == sharding and b.shape == (8, 3)
    assert len(b.addressable_shards) == 4
    np.testing.assert_array_equal(np.asarray(b)[:, 0], np.arange(8))
    it.set_state(st)
    again = list(it)
    assert [np.asarray(a["x"]).tolist() for a in again] == [np.asarray(a["x"]).tolist() for a in rest]
    it.close()
    single = experimental.device_put(ds, devices[1], cpu_buffer_size=0)
    x = next(iter(single))["x"]
    assert x.devices() == {devices[1]}


def test_device_put_over_mp_prefetch():
    import jax

    ds = (
        grain.MapDataset.range(16)
        .batch(4)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    it = iter(experimental.device_put(ds, jax.devices()[0]))
    got = [np.asarray(x).tolist() for x in it]
    it.close()
    assert got == [list(range(i, i + 4)) for i in range(0, 16, 4)]


@pytest.mark.parametrize("budget", [1, 70, 300, 4096])
def test_pick_performance_config_stays_in_budget(budget):
    ds = grain.MapDataset.range(1000).map(lambda x: np.full((64, 1024), x, np.float32))  # 256 KiB
    cfg = experimental.pick_performance_config(
        ds=ds, ram_budget_mb=budget, max_workers=None, max_buffer_size=None
    )
    assert isinstance(cfg, experimental.PerformanceConfig)
    assert cfg.element_bytes == 64 * 1024 * 4
    assert cfg.estimated_ram_mb <= budget or (
        cfg.multiprocessing_options.num_workers == 0 and cfg.read_options.prefetch_buffer_size == 1
    )
    buffered = cfg.read_options.prefetch_buffer_size * cfg.element_bytes / 2**20
    assert buffered <= max(budget, 0.25)
    import os

    assert cfg.multiprocessing_options.num_workers <= (os.cpu_count() or 1)


def test_pick_performance_config_iter_dataset_and_limits():
    def slow(x):
        time.sleep(0.001)
        return x

    from grain_core.runtime.autotune import MIN_WORKER_ELEMENT_SECONDS

    # Read by the caller (no threads): each next() includes its element's sleep.
    ds = grain.MapDataset.range(100).map(slow).to_iter_dataset(grain.ReadOptions(num_threads=0))
    cfg = experimental.pick_performance_config(ds, ram_budget_mb=1024, max_workers=1, max_buffer_size=8)
    # A 1 ms sleep per element is a lower bound on the measured time, whatever the load.
    assert cfg.element_seconds >= 0.001
    assert cfg.multiprocessing_options.num_workers == 1
    assert cfg.read_options.prefetch_buffer_size <= 8
    # How long a cheap element takes depends on the machine's load: check the rule, not the timing.
    cheap = experimental.pick_performance_config(grain.MapDataset.range(100), ram_budget_mb=1024)
    no_workers = cheap.multiprocessing_options.num_workers == 0
    assert no_workers == (cheap.element_seconds < MIN_WORKER_ELEMENT_SECONDS)
    assert threading.active_count() < 50
