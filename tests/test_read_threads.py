"""Read threads of a threaded ``to_iter_dataset``: all ``num_threads`` while reads wait, at most
the process's CPU share while reads are CPU work, none (inline) when that share is one CPU
(``grain_core/dataset/read_threads.py``). The verdict is fixed here (``_verdict``), never
measured, so nothing depends on timing."""

from __future__ import annotations

import threading

import pytest

import grain_core as grain
from grain_core.dataset.read_threads import (
    FixedVerdict,
    ReadVerdict,
    available_cpus,
    read_threads,
)
from grain_core.dataset.sharing import worker_share


@pytest.mark.parametrize(
    "num_threads, cpu_bound, workers, cpus, expected",
    [
        (16, False, 2, 2, 16),  # reads wait: all threads
        (16, None, 2, 2, 16),  # not measured yet: all threads (as Grain)
        (16, True, 2, 2, 0),  # one CPU per worker: inline
        (16, True, 1, 2, 2),
        (16, True, 2, 8, 4),
        (3, True, 1, 64, 3),  # never more than asked for
        (16, True, 3, 2, 0),  # fewer CPUs than workers
        (0, True, 1, 8, 0),
    ],
)
def test_thread_rule(num_threads, cpu_bound, workers, cpus, expected):
    assert read_threads(num_threads, cpu_bound, workers, cpus) == expected


def test_verdict_flips_only_after_reads_in_a_row_disagree():
    v = ReadVerdict()
    assert v.cpu_bound is None
    v.record(0.009, 0.01)  # CPU work: the first read sets the verdict
    assert v.cpu_bound is True
    for _ in range(ReadVerdict.TO_WAIT_READS - 1):
        v.record(0.0001, 0.01)  # waits
        assert v.cpu_bound is True
    v.record(0.009, 0.01)  # one CPU read resets the count
    for _ in range(ReadVerdict.TO_WAIT_READS - 1):
        v.record(0.0001, 0.01)
    assert v.cpu_bound is True
    v.record(0.0001, 0.01)
    assert v.cpu_bound is False
    for _ in range(ReadVerdict.TO_CPU_READS - 1):
        v.record(0.009, 0.01)
        assert v.cpu_bound is False
    v.record(0.009, 0.01)
    assert v.cpu_bound is True


def test_the_first_read_sets_the_verdict():
    v = ReadVerdict()
    v.record(0.0001, 0.01)
    assert v.cpu_bound is False


def _pipeline(names: set[str], n: int = 3000, num_threads: int = 16):
    """A shuffled range whose map notes the names of the threads that read."""

    def note(x):
        names.add(threading.current_thread().name)
        return x

    ds = grain.MapDataset.range(n).shuffle(seed=3).map(note)
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads, prefetch_buffer_size=64))


def _read_in_worker(cpu_bound, workers, n=3000, num_threads=16):
    """Reads worker 0's share of ``workers`` as an ``mp_prefetch`` worker builds it, with the
    verdict fixed: (elements, the state after every 97th element, names of the threads that read, the
    pool's thread limit or None without a pool)."""
    names: set[str] = set()
    ds = _pipeline(names, n, num_threads)
    with worker_share(0, workers):
        it = iter(ds)
    it._verdict = FixedVerdict(cpu_bound)
    out, states = [], []
    try:
        for k, x in enumerate(it):
            if k % 97 == 0:
                states.append(it.get_state())
            out.append(x)
        pool = None if it._pool is None else it._pool_threads
    finally:
        it.close()
    return out, states, names, pool


def test_cpu_bound_reads_in_a_one_cpu_worker_are_inline():
    workers = available_cpus()  # each worker's share: one CPU
    out, states, names, pool = _read_in_worker(True, workers)
    assert names == {threading.current_thread().name}  # no thread hand-off
    assert pool is None
    io_out, io_states, io_names, io_pool = _read_in_worker(False, workers)
    assert io_pool == 16  # reads that wait keep every thread (Grain's behaviour)
    assert any(name.startswith("grain_core-read") for name in io_names)
    # same elements, same order, same states whatever the thread count
    assert out == io_out and states == io_states
    expected = list(grain.MapDataset.range(3000).shuffle(seed=3))[0::workers]
    assert out == expected


def test_cpu_bound_reads_use_at_most_the_process_share():
    cpus = available_cpus()
    out, states, names, pool = _read_in_worker(True, 1, num_threads=64)
    share = min(64, cpus)
    if share > 1:
        assert pool is None or pool <= share
        reader_threads = {name for name in names if name.startswith("grain_core-read")}
        assert len(reader_threads) <= share
    else:
        assert pool is None
    io_out, io_states, _, _ = _read_in_worker(False, 1, num_threads=64)
    assert out == io_out and states == io_states


def test_a_restored_iterator_gives_the_same_elements_whatever_the_verdict():
    workers = available_cpus()
    out, states, _, _ = _read_in_worker(True, workers)
    ds = _pipeline(set())
    for cpu_bound in (True, False):
        with worker_share(0, workers):
            it = iter(ds)
        it._verdict = FixedVerdict(cpu_bound)
        try:
            it.set_state(states[3])
            assert [next(it) for _ in range(200)] == out[3 * 97 + 1 : 3 * 97 + 201]  # the state taken after element 291
        finally:
            it.close()
