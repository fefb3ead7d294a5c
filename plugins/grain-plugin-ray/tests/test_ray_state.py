"""The Ray runtime produces mp_prefetch's elements in mp_prefetch's order, and its states restore
exactly Ray->Ray, across worker counts, Ray<->mp_prefetch and Ray<->in process."""

from __future__ import annotations

import asyncio

import pytest
from grain_plugin_ray import RayRuntime, RayWorkerPool
from ray_pipelines import N, pipeline

import grain_core as grain
from grain_core import testing
from grain_core.state import StateMismatchError
from grain_core.testing.compare import assert_elements_equal

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

MP = grain.MultiprocessingOptions
RT = RayRuntime(num_cpus=0)
_REFERENCE: dict[int, list] = {}


def ray_ds(k: int, ds=None):
    ds = pipeline() if ds is None else ds
    return ds.mp_prefetch(MP(num_workers=k), runtime=RT)


def reference(k: int) -> list:
    """mp_prefetch's full output with ``k`` worker processes (0: in process)."""
    if k not in _REFERENCE:
        ds = pipeline().mp_prefetch(MP(num_workers=k)) if k else pipeline()
        with iter(ds) as it:
            _REFERENCE[k] = list(it)
    return _REFERENCE[k]


def load_in_process(state, directory):
    """An in-process iterator restored from ``state`` through the checkpoint files."""
    grain.checkpoint.write_state_file(directory, state, 0, 1)
    it = iter(pipeline())
    asyncio.run(it.load(directory))
    return it


def test_same_elements_in_the_same_order_as_mp_prefetch():
    """2 workers here; 3 workers are compared whole by the restores at step 0 below."""
    k = 2
    with iter(ray_ds(k)) as it:
        assert isinstance(it.pool, RayWorkerPool)
        got = list(it)
        state = it.get_state()
    assert_elements_equal(reference(k), got, f"Ray vs mp_prefetch with {k} workers")
    assert state["kind"] == "MultiprocessPrefetchDatasetIterator"
    assert state["num_workers"] == k and state["position"] == N
    assert all(w["exhausted"] for w in state["workers"])


def test_min_buffer_size_changes_the_actor_buffer_only():
    """Actors grouping 4 elements per call (per_worker_buffer_size=1, credits coalesced) give
    mp_prefetch's elements and states; a restore in the middle (a new generation with a credit
    pending) and a restore into processes continue exactly."""
    rt = RayRuntime(num_cpus=0, min_buffer_size=4)
    ds = pipeline().mp_prefetch(MP(num_workers=2), runtime=rt)
    ref = reference(2)
    with iter(ds) as it:
        assert it.pool.buffer_size == 4
        head = [next(it) for _ in range(7)]
        state = it.get_state()
        more = [next(it) for _ in range(5)]
        it.set_state(state)
        again = list(it)
    assert_elements_equal(ref, head + again, "Ray min_buffer_size=4 vs mp_prefetch")
    assert_elements_equal(ref[7:12], more, "before the restore")
    with iter(pipeline().mp_prefetch(MP(num_workers=2))) as it:
        it.set_state(state)
        assert_elements_equal(ref[7:], list(it), "Ray min_buffer_size=4 -> processes")


def test_zero_workers_is_in_process():
    ds = ray_ds(0)
    it = iter(ds)
    assert not hasattr(it, "pool")
    assert_elements_equal(reference(0), list(it), "num_workers=0")


def test_restore_anywhere_ray_mp_prefetch_and_in_process(tmp_path):
    """Every state of a 2-worker Ray run continues exactly in: Ray with 2 workers (one reused
    iterator, moved back and forth), mp_prefetch with 2 workers, Ray with 3 workers and in process
    (elastic: from the restore on, exactly an uninterrupted run with that count)."""
    ref2, ref3, ref0 = reference(2), reference(3), reference(0)
    with (
        iter(ray_ds(2)) as src,
        iter(ray_ds(2)) as ray2,
        iter(ray_ds(3)) as ray3,
        iter(pipeline().mp_prefetch(MP(num_workers=2))) as mp2,
    ):
        for step in range(N + 1):
            state = src.get_state()
            if step % 5 == 0 or step == N:
                for name, target, ref in (("Ray 2", ray2, ref2), ("mp 2", mp2, ref2)):
                    target.set_state(state)
                    assert_elements_equal(ref[step:], list(target), f"{name} restored at {step}")
                ray3.set_state(state)
                assert_elements_equal(ref3[step:], list(ray3), f"Ray 3 restored at {step}")
                with load_in_process(state, tmp_path / f"s{step}") as chain:
                    assert_elements_equal(ref0[step:], list(chain), f"in process at {step}")
            if step < N:
                assert_elements_equal([ref2[step]], [next(src)], f"source at {step}")


def test_mp_prefetch_and_in_process_states_restore_into_ray(tmp_path):
    ref2, ref3 = reference(2), reference(3)
    with (
        iter(pipeline().mp_prefetch(MP(num_workers=2))) as mp2,
        iter(pipeline()) as chain,
        iter(ray_ds(2)) as ray2,
        iter(ray_ds(3)) as ray3,
    ):
        for step in (0, 7, 18):
            while mp2.get_state()["position"] < step:
                next(mp2)
                next(chain)
            ray2.set_state(mp2.get_state())
            assert_elements_equal(ref2[step:], list(ray2), f"mp 2 -> Ray 2 at {step}")
            ray3.set_state(mp2.get_state())
            assert_elements_equal(ref3[step:], list(ray3), f"mp 2 -> Ray 3 at {step}")
            ray3.set_state(chain.get_state())
            assert_elements_equal(ref3[step:], list(ray3), f"in process -> Ray 3 at {step}")


def test_refused_states_change_nothing():
    other = grain.MapDataset.range(N).to_iter_dataset()
    with iter(ray_ds(2)) as it, iter(ray_ds(2, other)) as foreign:
        next(foreign)
        first = [next(it) for _ in range(4)]
        before = it.get_state()
        with pytest.raises(StateMismatchError):
            it.set_state(foreign.get_state())
        with pytest.raises(TypeError):
            it.set_state("not a state")
        assert it.get_state() == before
        assert_elements_equal(reference(2), first + list(it), "after refused states")


def test_elastic_restore_refused_where_mp_prefetch_refuses_it():
    batched = grain.MapDataset.range(20).to_iter_dataset().batch(2)
    with iter(batched.mp_prefetch(MP(num_workers=2), runtime=RT)) as it2:
        next(it2)
        state = it2.get_state()
    with iter(batched.mp_prefetch(MP(num_workers=3), runtime=RT)) as it3:
        before = it3.get_state()
        with pytest.raises(StateMismatchError, match="BatchIterDataset|one-to-one"):
            it3.set_state(state)
        assert it3.get_state() == before
        assert [int(b[0]) for b in it3][:3] == [0, 1, 2]  # batches [0, 3], [1, 4], [2, 5]


def test_conformance_kit():
    testing.assert_equal_output_after_checkpoint(ray_ds(2), checkpoints=[0, 5, N])
    testing.check_deterministic(lambda: ray_ds(2), max_elements=N)
