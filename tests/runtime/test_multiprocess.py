"""mp_prefetch with real worker processes: order, state, faults and leaks."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from runtime_helpers import alive, our_segments

import grain_core as grain
from grain_core.runtime.multiprocess import WorkerError
from grain_core.state import StateMismatchError

# A hang guard, not a speed check: each test starts worker processes, and on a loaded 2-core
# machine one start can take seconds (the leak test below took 55 s there with a 60 s cap).
pytestmark = pytest.mark.timeout(300)

MP = grain.MultiprocessingOptions


def _pipeline(n=40, workers=2, **kw):
    return (
        grain.MapDataset.range(n)
        .shuffle(seed=3)
        .map(lambda x: {"x": np.full((300,), x), "i": x})
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(MP(num_workers=workers, **kw))
    )


def _ids(elements):
    return [int(e["i"]) for e in elements]


def _expected(n=40):
    return list(grain.MapDataset.range(n).shuffle(seed=3))


def _assert_released(pids):
    deadline = time.monotonic() + 30  # a hang guard for a loaded machine, not a speed check
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [p for p in pids if alive(p)]
    assert our_segments() == []


def test_seed_002_example_order_matches_in_process():
    ds = (
        grain.MapDataset.range(64)
        .shuffle(seed=42)
        .map(lambda x: x * 2)
        .batch(batch_size=8)
        .to_iter_dataset()
    )
    expected = [b.tolist() for b in ds]
    it = iter(ds.mp_prefetch(MP(num_workers=2, per_worker_buffer_size=2)))
    try:
        got = [b.tolist() for b in it]
    finally:
        it.close()
    assert got == expected


def test_seed_004_example_per_worker_buffer():
    ds = grain.MapDataset.source(list(range(30))).to_iter_dataset()
    with iter(ds.mp_prefetch(MP(num_workers=2, per_worker_buffer_size=10))) as it:
        assert list(it) == list(range(30))


def test_zero_workers_is_in_process():
    ds = grain.MapDataset.range(10).to_iter_dataset()
    it = iter(ds.mp_prefetch(MP(num_workers=0)))
    assert isinstance(it, grain.DatasetIterator)
    assert list(it) == list(range(10))
    assert list(ds.mp_prefetch()) == list(range(10))


def test_arrays_arrive_intact_and_writable():
    with iter(_pipeline()) as it:
        out = list(it)
    assert _ids(out) == _expected()
    for e in out:
        assert e["x"].shape == (300,) and (e["x"] == e["i"]).all()
        assert e["x"].flags.writeable and e["x"].flags.owndata is False
        e["x"][0] = -1  # the consumer owns the memory
    assert our_segments() == []


def test_order_independent_of_timing_and_uneven_exhaustion():
    def slow_even(x):
        if x % 2 == 0:
            time.sleep(0.002 * (x % 5))
        return x

    base = grain.MapDataset.range(23).filter(lambda x: x % 7 != 3).map(slow_even).to_iter_dataset()
    expected = list(base.batch(3))  # in-process reference of the per-worker batching below
    del expected
    ds = base.batch(3).mp_prefetch(MP(num_workers=2))
    runs = []
    for _ in range(2):
        with iter(ds) as it:
            runs.append([b.tolist() for b in it])
    assert runs[0] == runs[1]
    # Worker w batches the elements at positions w, w+2, ... of the MapDataset; round-robin, then the
    # worker with more batches continues alone.
    w0 = [x for x in range(0, 23, 2) if x % 7 != 3]
    w1 = [x for x in range(1, 23, 2) if x % 7 != 3]
    b0 = [w0[i : i + 3] for i in range(0, len(w0), 3)]
    b1 = [w1[i : i + 3] for i in range(0, len(w1), 3)]
    merged = []
    for i in range(max(len(b0), len(b1))):
        merged += [b[i] for b in (b0, b1) if i < len(b)]
    assert runs[0] == merged


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_restore_at_many_points(workers):
    ds = _pipeline(n=30, workers=workers)
    with iter(ds) as it:
        full = _ids(it)
    assert full == _expected(30)
    states = {}
    with iter(ds) as it:
        for p in range(31):
            states[p] = json.loads(json.dumps(it.get_state()))
            if p < 30:
                next(it)
    with iter(ds) as it2:  # one warm iterator restored again and again
        for p in (0, 1, 2, 3, 7, 16, 29, 30, 5, 0):
            it2.set_state(states[p])
            assert _ids(it2) == full[p:], p
    # a fresh iterator restored mid-epoch
    with iter(ds) as it3:
        it3.set_state(states[11])
        assert _ids([next(it3) for _ in range(4)]) == full[11:15]
        st = it3.get_state()
    with iter(ds) as it4:
        it4.set_state(st)
        assert _ids(it4) == full[15:]


_FRESH = r"""
import json, sys
import numpy as np
import grain_core as grain
ds = (grain.MapDataset.range(30).shuffle(seed=3)
      .map(lambda x: {"x": np.full((300,), x), "i": x})
      .to_iter_dataset(grain.ReadOptions(num_threads=0))
      .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
with iter(ds) as it:
    it.set_state(json.loads(sys.stdin.read()))
    print(json.dumps([int(e["i"]) for e in it]))
"""


def test_restore_in_fresh_process():
    ds = _pipeline(n=30)
    with iter(ds) as it:
        for _ in range(13):
            next(it)
        state = it.get_state()
        rest = _ids(it)
    out = subprocess.run(
        [sys.executable, "-c", _FRESH],
        input=json.dumps(state),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == rest


def test_state_from_other_worker_count_is_refused_where_not_elastic():
    def filtered(workers):
        return (
            grain.MapDataset.range(10)
            .to_iter_dataset()
            .filter(lambda x: x % 3)
            .mp_prefetch(MP(num_workers=workers))
        )

    with iter(filtered(1)) as it:
        state = it.get_state()
    with iter(filtered(2)) as it:
        with pytest.raises(StateMismatchError, match="FilterIterDataset"):
            it.set_state(state)


def test_state_from_other_worker_count_restores_elastically():
    # One-to-one before mp_prefetch: see tests/runtime/test_elastic.py for the full matrix.
    with iter(_pipeline(n=10, workers=1)) as it:
        first = _ids([next(it) for _ in range(3)])
        state = it.get_state()
    with iter(_pipeline(n=10, workers=2)) as it:
        it.set_state(state)
        assert sorted(first + _ids(it)) == list(range(10))


def test_worker_exception_reraised_with_traceback_and_position():
    def boom(x):
        if x == 13:
            raise ValueError("bad element 13")
        return x

    ds = grain.MapDataset.range(20).map(boom).to_iter_dataset().mp_prefetch(MP(num_workers=2))
    with iter(ds) as it:
        got = []
        with pytest.raises(ValueError, match="bad element 13") as info:
            for x in it:
                got.append(x)
        assert got == list(range(13))
        notes = "\n".join(getattr(info.value, "__notes__", []))
        assert "worker 1 of 2" in notes and "output element #13" in notes
        assert "in boom" in notes and "Traceback" in notes
        with pytest.raises(ValueError):
            next(it)
    assert our_segments() == []


def test_unpicklable_worker_exception_becomes_worker_error():
    class LocalError(Exception):
        def __reduce__(self):
            raise TypeError("no pickling")

    def boom(x):
        raise LocalError("local")

    ds = grain.MapDataset.range(4).map(boom).to_iter_dataset().mp_prefetch(MP(num_workers=1))
    with iter(ds) as it, pytest.raises(WorkerError, match="LocalError"):
        next(it)


def test_worker_sigkill_is_reported_at_its_next_turn():
    options = MP(num_workers=2)
    ds = (
        grain.MapDataset.range(10_000)
        .map(lambda x: (time.sleep(0.01), x)[1])
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(options)
    )
    it = iter(ds)
    pids = it.worker_pids
    assert [next(it) for _ in range(4)] == [0, 1, 2, 3]
    os.kill(pids[1], signal.SIGKILL)
    received = 0
    with pytest.raises(WorkerError, match=r"worker 1 .*SIGKILL"):
        for _ in range(10_000):
            next(it)
            received += 1
    # Counted in elements, not seconds: round-robin output reaches worker 1's turn once the
    # elements it had produced ahead (per_worker_buffer_size, plus the one it was producing) are
    # used up, so the death is reported long before the end.
    in_flight = options.per_worker_buffer_size + 1
    assert received <= 2 * in_flight + 2
    it.close()
    _assert_released(pids)


def test_abandoned_iterator_is_collected():
    it = iter(_pipeline(n=400))
    next(it)
    next(it)
    pids = it.worker_pids
    del it
    gc.collect()
    _assert_released(pids)


def test_close_during_blocked_read():
    # The worker's first element takes an hour: next() can only return because close() ended it.
    ds = (
        grain.MapDataset.range(4)
        .map(lambda x: time.sleep(3600) if x == 0 else x)
        .to_iter_dataset()
        .mp_prefetch(MP(num_workers=1))
    )
    it = iter(ds)
    pids = it.worker_pids
    threading.Timer(0.3, it.close).start()
    with pytest.raises(RuntimeError, match="closed"):
        next(it)
    _assert_released(pids)


def test_interpreter_exit_ends_workers():
    code = (
        "import grain_core as grain\n"
        "ds = grain.MapDataset.range(10**6).to_iter_dataset().mp_prefetch("
        "grain.MultiprocessingOptions(num_workers=2))\n"
        "it = iter(ds); next(it); print(*it.worker_pids)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_open_iterate_close_cycles_leak_nothing():
    """40 cycles (80 worker starts): a process, thread, fd or shared-memory segment left behind per
    cycle shows as 40 of them, far above the slack allowed below."""
    ds = grain.MapDataset.range(6).map(lambda x: np.full((512,), x)).to_iter_dataset()
    ds = ds.mp_prefetch(MP(num_workers=2))
    threads_before = threading.active_count()
    fds_before = len(os.listdir("/proc/self/fd"))
    pids = []
    for cycle in range(40):
        it = iter(ds)
        pids += it.worker_pids
        if cycle % 3 == 0:
            assert [int(a[0]) for a in it] == list(range(6))
        else:
            next(it)  # abandon mid-epoch
        it.close()
    _assert_released(pids)
    assert threading.active_count() <= threads_before
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 2


def test_lambdas_closures_and_local_classes():
    offset = 100

    class Point:
        def __init__(self, v):
            self.v = v

    ds = (
        grain.MapDataset.range(8)
        .map(lambda x: x + offset)
        .map(Point)
        .to_iter_dataset()
        .map(lambda p: Point(p.v * 2))
        .mp_prefetch(MP(num_workers=2))
    )
    with iter(ds) as it:
        assert [p.v for p in it] == [2 * (x + 100) for x in range(8)]


def test_worker_init_fn_runs_first_in_each_worker():
    def init(i, k):
        os.environ["GRAIN_CORE_TEST_WORKER"] = f"{i}/{k}"

    ds = (
        grain.MapDataset.range(6)
        .map(lambda x: (x, os.environ.get("GRAIN_CORE_TEST_WORKER")))
        .to_iter_dataset()
        .mp_prefetch(MP(num_workers=2), worker_init_fn=init)
    )
    with iter(ds) as it:
        assert list(it) == [(x, f"{x % 2}/2") for x in range(6)]


def test_plugins_visible_in_workers():
    def inner(x):
        return int(sum(grain.MapDataset.range(x + 1)))  # needs the range plugin in the worker

    ds = grain.MapDataset.source(list(range(6))).map(inner).to_iter_dataset()
    with iter(ds.mp_prefetch(MP(num_workers=2))) as it:
        assert list(it) == [x * (x + 1) // 2 for x in range(6)]


def test_default_options_use_up_to_ten_workers_capped_by_cpus():
    import os

    import grain_core as grain

    ds = grain.MapDataset.range(8).to_iter_dataset().mp_prefetch()
    assert ds.multiprocessing_options.num_workers == min(10, os.cpu_count() or 1)
    with iter(ds) as it:
        assert sorted(it) == list(range(8))


def test_pipeline_that_cannot_be_split_is_refused():
    import grain_core as grain

    class Plain(grain.IterDataset):
        def __iter__(self):
            from grain_core.dataset.sharing import no_worker_share

            with no_worker_share():
                return iter(grain.MapDataset.range(4).to_iter_dataset())

    with pytest.raises(ValueError, match="no stage of this pipeline can read a share"):
        list(Plain().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    one = Plain().mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
    with iter(one) as it:
        assert list(it) == [0, 1, 2, 3]


def test_states_taken_while_building_are_the_workers_own():
    import grain_core as grain

    # flat_map snapshots its parent's state when created: that state must already be the worker's.
    class Twice(grain.transforms.FlatMap):
        max_fan_out = 2

        def flat_map(self, x):
            return [x, x]

    ds = grain.experimental.FlatMapIterDataset(
        grain.MapDataset.range(6).to_iter_dataset().batch(1), Twice()
    ).mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    from grain_core import testing as kit

    kit.assert_equal_output_after_checkpoint(ds)
