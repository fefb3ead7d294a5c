"""Grain 0.2.18's thread-prefetch unit tests, ported to grain_core's public API (plain pytest).

Ported from ``grain/_src/python/dataset/transformations/prefetch_test.py``
(``ThreadPrefetchIterDatasetTest``): ``test_prefetch_data`` (every case), ``test_checkpoint``,
``test_set_state_on_fresh_iterator``, ``test_get_state_doesnt_start_prefetch`` (checked without
sleeping: no element is computed and no thread started), ``test_parent_dataset_modifies_state``,
``test_fails_with_negative_prefetch_buffer_size``, ``test_start_prefetch_with_mp_prefetch_but_no_read``,
``test_does_not_create_reference_to_itself``, ``test_does_not_hang_after_stop_iteration``,
``test_nonnative_iterator``, ``test_no_mem_leak*`` (fewer rounds), ``test_element_spec``,
``test_get_next_index``, ``test_set_next_index``. Not ported: ``test_early_break_continues_prefetching``
and ``test_set_next_index_get_state`` (they measure timing or patch internals).

Every test runs under a pytest-timeout bound, so a hang fails it.
"""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np
import pytest

import grain_core as grain

pytestmark = pytest.mark.timeout(120)

ThreadPrefetch = grain.experimental.ThreadPrefetchIterDataset


class FilterKeepingOddElementsOnly(grain.transforms.Filter):
    def filter(self, element):
        return bool(element % 2)


def _odd():
    return grain.MapDataset.range(20).to_iter_dataset().filter(FilterKeepingOddElementsOnly())


@pytest.mark.parametrize(
    "prefetch_buffer_size, warm_start",
    [(0, False), (0, True), (1, True), (20, False), (200, True)],
)
def test_prefetch_data(prefetch_buffer_size, warm_start):
    it = iter(ThreadPrefetch(_odd(), prefetch_buffer_size=prefetch_buffer_size))
    if warm_start:
        it.start_prefetch()
    assert list(it) == list(range(1, 20, 2))
    it.close()


@pytest.mark.parametrize("warm_start", [False, True])
def test_checkpoint(warm_start):
    it = iter(ThreadPrefetch(_odd(), prefetch_buffer_size=500))
    if warm_start:
        it.start_prefetch()
    checkpoints, values = [], []
    for _ in range(10):
        checkpoints.append(it.get_state())
        values.append(next(it))
    for start in range(9):
        it.set_state(checkpoints[start])
        assert [next(it) for _ in range(start, 10)] == values[start:]
    it.close()


def test_set_state_on_fresh_iterator():
    ds = ThreadPrefetch(_odd(), prefetch_buffer_size=2)
    it = iter(ds)
    checkpoints, values = [], []
    for _ in range(10):
        checkpoints.append(it.get_state())
        values.append(next(it))
    for start in range(9):
        fresh = iter(ds)
        fresh.set_state(checkpoints[start])
        assert [next(fresh) for _ in range(start, 10)] == values[start:]
        fresh.close()


def test_get_state_doesnt_start_prefetch():
    event = threading.Event()

    def f(x):
        event.set()
        return x

    ds = ThreadPrefetch(
        grain.MapDataset.source([1, 2, 3]).map(f).to_iter_dataset(), prefetch_buffer_size=10
    )
    before = set(threading.enumerate())
    it = iter(ds)
    it.get_state()
    assert not event.is_set()
    assert set(threading.enumerate()) <= before
    it.close()


class _ConstantIterator(grain.DatasetIterator):
    def __next__(self):
        return 1

    def get_state(self):
        return {"test": 1}

    def set_state(self, state):
        pass


class _ConstantDataset(grain.IterDataset):
    def __iter__(self):
        return _ConstantIterator()


def test_parent_dataset_modifies_state():
    it = iter(ThreadPrefetch(_ConstantDataset(), prefetch_buffer_size=1))
    it.set_state({"test": 2})
    # The state holds the parent's own state, which the parent kept at {"test": 1}.
    assert it.get_state()["parent"] == {"test": 1}
    it.close()


def test_fails_with_negative_prefetch_buffer_size():
    with pytest.raises(
        ValueError, match="`prefetch_buffer_size` must be greater than or equal to 0"
    ):
        ThreadPrefetch(_odd(), prefetch_buffer_size=-1)


def test_start_prefetch_with_mp_prefetch_but_no_read():
    ds = grain.MapDataset.source([1, 2, 3]).repeat().to_iter_dataset()
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    it = iter(ThreadPrefetch(ds, prefetch_buffer_size=10))
    it.start_prefetch()
    it.close()
    del it


def test_does_not_create_reference_to_itself():
    ds = ThreadPrefetch(
        grain.MapDataset.source([1, 2, 3]).repeat(100).to_iter_dataset(), prefetch_buffer_size=10
    )
    it = iter(ds)
    before = sys.getrefcount(it)
    next(it)
    assert sys.getrefcount(it) == before
    it.close()


def test_does_not_hang_after_stop_iteration():
    ds = ThreadPrefetch(
        grain.MapDataset.source([1, 2, 3]).repeat(100).to_iter_dataset(), prefetch_buffer_size=10
    )
    it = iter(ds)
    assert len(list(it)) == 300
    assert list(it) == []
    it.close()


class _NonNativeIterator:
    def __init__(self):
        self._counter = 0

    def __iter__(self):
        return self

    def __next__(self):
        self._counter += 1
        if self._counter > 10:
            raise StopIteration
        return self._counter

    def get_state(self):
        return {"counter": self._counter}

    def set_state(self, state):
        self._counter = state["counter"]


def test_nonnative_iterator():
    it = grain.experimental.ThreadPrefetchDatasetIterator(
        _NonNativeIterator(), prefetch_buffer_size=10
    )
    elements = [next(it) for _ in range(5)]
    checkpoint = it.get_state()
    elements.extend(it)
    assert elements == list(range(1, 11))
    it.set_state(checkpoint)
    assert list(it) == elements[5:]
    it.close()


def _big():
    return (
        grain.MapDataset.range(1000)
        .repeat()
        .map(lambda x: x * np.ones((1000, 1000), dtype=np.int64))
        .to_iter_dataset(grain.ReadOptions(prefetch_buffer_size=0))
    )


@pytest.mark.parametrize("double, close", [(False, False), (True, True), (True, False)])
def test_no_mem_leak(double, close):
    ds = ThreadPrefetch(_big(), prefetch_buffer_size=10)
    if double:
        ds = ThreadPrefetch(ds.map(lambda x: x + 1), prefetch_buffer_size=10)
    # 8 MB elements, 10 buffered: iterators that kept their buffers after being dropped would
    # hold 80 MB each; 30 rounds would take 2.4 GB.
    for _ in range(30):
        it = iter(ds)
        for _ in range(5):
            next(it)
        if close:
            it.close()
        del it
    gc.collect()


def test_element_spec():
    ds = ThreadPrefetch(grain.MapDataset.range(2).to_iter_dataset(), prefetch_buffer_size=1)
    spec = grain.experimental.get_element_spec(ds)
    assert spec.dtype == np.int64 and spec.shape == ()


def test_get_next_index():
    it = iter(ThreadPrefetch(grain.MapDataset.range(20).to_iter_dataset(), prefetch_buffer_size=10))
    for i in range(20):
        assert grain.experimental.get_next_index(it) == i
        next(it)
    it.close()


def test_set_next_index():
    it = iter(ThreadPrefetch(grain.MapDataset.range(20).to_iter_dataset(), prefetch_buffer_size=10))
    for i in reversed(range(20)):
        grain.experimental.set_next_index(it, i)
        assert next(it) == i
    it.close()
