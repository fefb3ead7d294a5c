"""Lifecycle of the Ray runtime: selection by name, worker exceptions, dead and unplaceable actors,
back-pressure, the zero-copy path, and no actor left behind after close / with / GC / errors."""

from __future__ import annotations

import gc
import os
import time

import numpy as np
import pytest
from grain_plugin_ray import ACTOR_NAMESPACE, RayRuntime, RayWorkerPool
from ray_pipelines import held_back_pipeline, pipeline

import grain_core as grain
from grain_core import testing
from grain_core.runtime.api import AHEAD_BYTES, WorkerError
from grain_core.testing.compare import assert_elements_equal

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

MP = grain.MultiprocessingOptions
RT = RayRuntime(num_cpus=0)
#: Actors that run at most about one element past their buffer (with held_back_pipeline): the tests
#: that kill an actor mid-share need it to still owe elements when it dies.
HELD_BACK = RayRuntime(num_cpus=0, ahead_bytes=AHEAD_BYTES)


def live_actor_names() -> set[str]:
    import ray

    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == ACTOR_NAMESPACE}


def assert_actors_gone(names, handles):
    """Every actor handle ends up failing with RayActorError (``ray.kill`` is asynchronous: a call
    may still be answered just after it) and no actor of ``names`` stays listed."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    deadline = time.monotonic() + 120  # a liveness bound, not a timing assertion
    for h in handles:
        while True:
            try:
                ray.get(h.location.remote(), timeout=10)
            except RayActorError:
                break
            except GetTimeoutError:
                pass
            assert time.monotonic() < deadline, f"actor {h} still answers after close"
            time.sleep(0.2)
    while set(names) & live_actor_names() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(names) & live_actor_names()


def test_plugin_listed_and_runtime_selected_by_name():
    testing.check_plugin_listed("ray", "grain-plugin-ray", provides=["ray"])
    ds = grain.MapDataset.range(6).to_iter_dataset().mp_prefetch(MP(num_workers=1), runtime="ray")
    with iter(ds) as it:
        assert isinstance(it.pool, RayWorkerPool)
        assert [int(x) for x in it] == list(range(6))


def test_bad_runtime_options_are_refused_early():
    with pytest.raises(ValueError, match="num_cpus"):
        RayRuntime(num_cpus=-1)
    with pytest.raises(ValueError, match="resources"):
        RayRuntime(resources={"gpu_host": 0})
    with pytest.raises(ValueError, match="start_timeout_s"):
        RayRuntime(start_timeout_s=0)
    with pytest.raises(TypeError, match="address"):
        RayRuntime(address=6379)
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match="min_buffer_size"):
            RayRuntime(min_buffer_size=bad)
    for bad in (-1, True, 1.0):
        with pytest.raises(ValueError, match="max_restarts"):
            RayRuntime(max_restarts=bad)
    for bad in (AHEAD_BYTES - 1, True, 2.0 * AHEAD_BYTES):
        with pytest.raises(ValueError, match="ahead_bytes"):
            RayRuntime(ahead_bytes=bad)


def test_worker_exception_is_reraised_after_the_elements_before_it():
    def boom(x):
        if x == 7:
            raise KeyError(f"bad element {x}")
        return x

    ds = grain.MapDataset.range(12).to_iter_dataset().map(boom).mp_prefetch(MP(2), runtime=RT)
    got = []
    with iter(ds) as it, pytest.raises(KeyError, match="bad element 7") as info:
        for x in it:
            got.append(int(x))
    assert got == list(range(7))
    assert any("worker 1 of 2" in n and "element #7" in n for n in info.value.__notes__)


def test_dead_actor_is_reported_and_the_last_state_restores_exactly():
    import ray

    ref = list(iter(held_back_pipeline().mp_prefetch(MP(num_workers=2))))
    it = iter(held_back_pipeline().mp_prefetch(MP(num_workers=2), runtime=HELD_BACK))
    head = [next(it) for _ in range(5)]
    state = it.get_state()
    names = it.pool.actor_names
    victim = it.pool.channels[1].actor
    ray.kill(victim, no_restart=True)
    with pytest.raises(WorkerError, match=r"worker 1 \(Ray actor .*w1.* died.*output element #\d+"):
        for _ in it:
            pass
    it.close()
    assert_actors_gone(names, [victim])
    with iter(held_back_pipeline().mp_prefetch(MP(num_workers=2), runtime=HELD_BACK)) as again:
        again.set_state(state)
        assert_elements_equal(ref, head + list(again), "restored after a dead actor")


@pytest.mark.parametrize("min_buffer", [None, 4])
def test_max_restarts_replaces_killed_actors_and_the_output_stays_exact(min_buffer):
    """Worker 1's actor is killed twice (the second time its replacement): each is replaced from
    the last elements it delivered, so the output, random draws included, and the states are
    exactly mp_prefetch's; no actor, replaced or not, is left afterwards."""
    import ray

    ref = list(iter(held_back_pipeline().mp_prefetch(MP(num_workers=2))))
    rt = RayRuntime(num_cpus=0, max_restarts=2, min_buffer_size=min_buffer, ahead_bytes=AHEAD_BYTES)
    with iter(held_back_pipeline().mp_prefetch(MP(num_workers=2), runtime=rt)) as it:
        got = [next(it) for _ in range(5)]
        killed = [it.pool.channels[1].actor]
        ray.kill(killed[-1], no_restart=True)
        # The death shows once the elements it delivered before it are used up.
        while it.pool.channels[1].restarts == 0:
            got.append(next(it))
        got.append(next(it))
        state, at = it.get_state(), len(got)
        killed.append(it.pool.channels[1].actor)
        ray.kill(killed[-1], no_restart=True)
        got += list(it)
        assert [c.restarts for c in it.pool.channels] == [0, 2]
        names = it.pool.actor_names
        handles = killed + [c.actor for c in it.pool.channels]
    assert_elements_equal(ref, got, "with two actors replaced")
    assert_actors_gone(names, handles)
    with iter(held_back_pipeline().mp_prefetch(MP(num_workers=2))) as again:  # a state taken in between
        again.set_state(state)
        assert_elements_equal(ref[at:], list(again), "state after a replacement -> processes")


def test_a_worker_out_of_restarts_is_reported():
    import ray

    rt = RayRuntime(num_cpus=0, max_restarts=1, ahead_bytes=AHEAD_BYTES)
    with iter(held_back_pipeline().mp_prefetch(MP(num_workers=2), runtime=rt)) as it:
        next(it)
        ray.kill(it.pool.channels[0].actor, no_restart=True)
        while it.pool.channels[0].restarts == 0:  # until the death shows
            next(it)
        ray.kill(it.pool.channels[0].actor, no_restart=True)
        with pytest.raises(WorkerError, match=r"worker 0 \(Ray actor .*-r1.*after 1 restart"):
            for _ in it:
                pass


def test_unplaceable_actor_is_reported_and_removed():
    rt = RayRuntime(num_cpus=0, resources={"no_such_node": 1}, start_timeout_s=2)
    ds = grain.MapDataset.range(4).to_iter_dataset().mp_prefetch(MP(num_workers=1), runtime=rt)
    it = iter(ds)
    names, handles = it.pool.actor_names, [c.actor for c in it.pool.channels]
    with pytest.raises(WorkerError, match=r"worker 0 \(Ray actor .*no_such_node"):
        next(it)
    it.close()
    assert_actors_gone(names, handles)


@pytest.mark.parametrize("how", ["close", "with", "gc", "exception"])
def test_no_actor_left(how):
    ds = pipeline().mp_prefetch(MP(num_workers=2), runtime=RT)
    it = iter(ds)
    next(it)
    names, handles = it.pool.actor_names, [c.actor for c in it.pool.channels]
    assert set(names) <= live_actor_names()
    if how == "close":
        it.close()
        it.close()  # idempotent
    elif how == "with":
        with it:
            next(it)
    elif how == "gc":
        del it
        gc.collect()
    else:
        with pytest.raises(ZeroDivisionError), it:
            next(it)
            1 / 0  # noqa: B018
    assert_actors_gone(names, handles)


@pytest.mark.parametrize("buffer,min_buffer,bound", [(3, None, 3), (1, 5, 5), (6, 2, 6)])
def test_back_pressure_bounds_elements_produced_ahead(tmp_path, buffer, min_buffer, bound):
    """However long the consumer waits, a worker holds at most per_worker_buffer_size elements
    (``RayRuntime.min_buffer_size`` when larger) produced and not yet returned, plus the one it
    produces while its buffer is full; with min_buffer_size it does run that far ahead, less the
    credits the channel holds back (it posts one when it frees half the buffer, or when the
    consumer waits: this consumer does not wait, so up to ``bound // 2 - 1`` returned elements
    may not be credited yet). Elements of ``AHEAD_BYTES`` each under ``ahead_bytes=AHEAD_BYTES``,
    so the bound is in elements (smaller ones may run further ahead, up to that many bytes: as in
    a worker process; the byte bound is the next test's)."""
    held_back = max(1, bound // 2) - 1
    log = tmp_path / "produced"

    def record(x):
        with open(log, "a") as f:
            f.write(f"{x}\n")
        return np.full(AHEAD_BYTES // 8, x)

    def produced() -> int:
        return len(log.read_text().split()) if log.exists() else 0

    rt = RayRuntime(num_cpus=0, min_buffer_size=min_buffer, ahead_bytes=AHEAD_BYTES)
    ds = grain.MapDataset.range(200).to_iter_dataset().map(record)
    options = MP(num_workers=1, per_worker_buffer_size=buffer)
    with iter(ds.mp_prefetch(options, runtime=rt)) as it:
        assert it.pool.buffer_size == bound
        for consumed in (1, 4):
            while int(it.get_state()["position"]) < consumed:
                next(it)
            deadline = time.monotonic() + 120  # a liveness bound, not a timing assertion
            while produced() < consumed + bound - held_back and time.monotonic() < deadline:
                time.sleep(0.1)
            assert produced() >= consumed + bound - held_back, (consumed, produced())
            time.sleep(2)  # room for a worker that ignored the bound to run far ahead
            assert produced() <= consumed + bound + 1, (consumed, produced())


def test_actors_group_elements_up_to_ahead_bytes_at_a_buffer_of_one(tmp_path):
    """At Grain's default buffer of 1, an actor runs ahead of ``next()`` by bytes: it starts another
    element while those it holds ahead take under ``RayRuntime.ahead_bytes`` (here 8 elements of
    1 MiB), so one call carries a group; it never holds more than that plus the one in
    production. The consumer credits it with each fetch call and, when it stops fetching, every
    three quarters of the allowance (at most 5 returned elements of 1 MiB uncredited here, plus
    the geometric start), so after 24 returned it has run at least 1 beyond the buffer's bound of
    2 (24 - 5 + 8), and never beyond ``24 + 8 + 1``."""
    log = tmp_path / "produced"
    mib = AHEAD_BYTES

    def record(x):
        with open(log, "a") as f:
            f.write(f"{x}\n")
        return np.full(mib // 8, x)

    def produced() -> int:
        return len(log.read_text().split()) if log.exists() else 0

    rt = RayRuntime(num_cpus=0, ahead_bytes=8 * mib)
    ds = grain.MapDataset.range(200).to_iter_dataset().map(record)
    with iter(ds.mp_prefetch(MP(num_workers=1, per_worker_buffer_size=1), runtime=rt)) as it:
        assert it.pool.buffer_size == 1 and it.pool.ahead_bytes == 8 * mib
        consumed = 24
        for _ in range(consumed):
            next(it)
        deadline = time.monotonic() + 120  # a liveness bound, not a timing assertion
        while produced() < consumed + 2 + 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert produced() >= consumed + 2 + 1, produced()
        time.sleep(2)  # room for an actor that ignored the byte bound to run far ahead
        assert produced() <= consumed + 8 + 1, produced()


def test_large_numpy_leaves_arrive_through_the_object_store():
    """256 KiB leaves come back equal, as read-only zero-copy views of Ray's object store (with
    the one-host shared-memory path switched off, as for actors on other nodes)."""
    def big(x):
        return {"x": x, "a": np.full(1 << 15, x, dtype=np.int64)}

    ds = grain.MapDataset.range(6).map(big).to_iter_dataset()
    store = RayRuntime(num_cpus=0, shared_memory=False)
    with iter(ds.mp_prefetch(MP(num_workers=2), runtime=store)) as it:
        got = list(it)
    assert [int(e["x"]) for e in got] == list(range(6))
    for e in got:
        np.testing.assert_array_equal(e["a"], np.full(1 << 15, e["x"], dtype=np.int64))
        assert not e["a"].flags.writeable  # a view of the object store, not a copy


def test_worker_environment_reaches_the_actors(monkeypatch):
    monkeypatch.setenv("GRAIN_CORE_RAY_TEST_MARK", "seen")
    ds = grain.MapDataset.range(2).to_iter_dataset().map(
        lambda x: os.environ.get("GRAIN_CORE_RAY_TEST_MARK")
    )
    with iter(ds.mp_prefetch(MP(num_workers=1), runtime=RT)) as it:
        assert list(it) == ["seen", "seen"]
