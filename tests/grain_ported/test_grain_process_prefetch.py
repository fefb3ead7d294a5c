"""Grain 0.2.18's multiprocess-prefetch unit tests, ported to grain_core's public API
(``IterDataset.mp_prefetch``; plain pytest).

Ported from ``grain/_src/python/dataset/transformations/process_prefetch_test.py``
(``MultiprocessingPrefetchTest``): ``test_prefetch_data`` (0, 1 and 3 workers instead of 10 on
small CI machines), ``test_prefetch_size_zero_data``, ``test_checkpoint``, ``test_set_state_twice``,
``test_get_next_index_with_1_worker``, ``test_set_next_index_with_1_worker``,
``test_works_with_iter_source_single_worker``, ``test_fails_with_iter_source_multiple_workers``,
``test_propagates_transform_error``, ``test_reports_worker_crash``,
``test_reports_unpicklable_transform``, ``test_reports_first_unpicklable_dataset_when_with_multiple_parents``,
``test_reports_unpicklable_issue_when_only_one_parent_unpicklable``.

Every test runs under a pytest-timeout bound, so a worker that hangs fails the test.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

import grain_core as grain

pytestmark = pytest.mark.timeout(300)


class FilterKeepingOddElementsOnly(grain.transforms.Filter):
    def filter(self, element):
        return bool(element % 2)


def _odd():
    return grain.MapDataset.range(20).to_iter_dataset().filter(FilterKeepingOddElementsOnly())


def _mp(ds, num_workers, buffer_size=1):
    return ds.mp_prefetch(
        grain.MultiprocessingOptions(num_workers=num_workers, per_worker_buffer_size=buffer_size)
    )


# With 3 workers (worker i reads indices i::3), Grain's round robin gives this order (recorded from
# google grain 0.2.18); with 0 or 1 worker the order of the input.
_THREE_WORKERS = [3, 1, 5, 9, 7, 11, 15, 13, 17, 19]


@pytest.mark.parametrize("num_workers, buffer_size", [(0, 1), (1, 1), (1, 20), (3, 1), (3, 20)])
def test_prefetch_data(num_workers, buffer_size):
    expected = _THREE_WORKERS if num_workers == 3 else list(range(1, 20, 2))
    assert list(_mp(_odd(), num_workers, buffer_size)) == expected


def test_prefetch_size_zero_data():
    ds = grain.MapDataset.source([np.zeros(shape=(0,), dtype=np.int64)]).repeat(3).to_iter_dataset()
    out = list(_mp(ds, 1))
    assert len(out) == 3
    for x in out:
        np.testing.assert_array_equal(x, np.zeros(shape=(0,), dtype=np.int64))


@pytest.mark.parametrize("num_workers, step", list(itertools.product([0, 1, 3], [0, 3, 8])))
def test_checkpoint(num_workers, step):
    it = iter(_mp(_odd(), num_workers))
    checkpoints, values = [], []
    for _ in range(10):
        checkpoints.append(it.get_state())
        values.append(next(it))
    it.set_state(checkpoints[step])
    assert [next(it) for _ in range(step, 10)] == values[step:]
    it.close()


def test_set_state_twice():
    it = iter(_mp(_odd(), 2))
    checkpoints, values = [], []
    for _ in range(10):
        checkpoints.append(it.get_state())
        values.append(next(it))
    for step in [0, 3, 8]:
        it.set_state(checkpoints[step])
        assert [next(it) for _ in range(step, 10)] == values[step:]
    it.close()


def test_get_next_index_with_1_worker():
    it = iter(_mp(grain.MapDataset.range(10).to_iter_dataset(), 1))
    for i in range(10):
        assert grain.experimental.get_next_index(it) == i
        next(it)
    it.close()


def test_set_next_index_with_1_worker():
    it = iter(_mp(grain.MapDataset.range(10).to_iter_dataset(), 1))
    for i in reversed(range(10)):
        grain.experimental.set_next_index(it, i)
        assert next(it) == i
    it.close()


class RepeatedIntSourceIterDataset(grain.IterDataset):
    def __iter__(self):
        return RepeatedIntSourceDatasetIterator()


class RepeatedIntSourceDatasetIterator(grain.DatasetIterator):
    def __next__(self):
        return 1

    def get_state(self):
        return {}

    def set_state(self, state):
        pass


def _plus_one(x):
    return x + 1


def test_works_with_iter_source_single_worker():
    it = iter(_mp(RepeatedIntSourceIterDataset().map(_plus_one), 1))
    assert next(it) == 2
    it.close()


def test_fails_with_iter_source_multiple_workers():
    with pytest.raises(ValueError, match="Cannot slice `IterDataset` source."):
        list(_mp(RepeatedIntSourceIterDataset().map(_plus_one), 2))


def _fail(element):
    raise ValueError("I shall fail!")


def _exit(element):
    sys.exit(123)


def test_propagates_transform_error():
    with pytest.raises(Exception, match="I shall fail!"):
        list(_mp(_odd().map(_fail), 1))


def test_reports_worker_crash():
    with pytest.raises(RuntimeError, match="was terminated unexpectedly with exit code 123"):
        list(_mp(_odd().map(_exit), 1))


class UnpicklableObject:
    def __getstate__(self):
        raise ValueError("UnpicklableObject is not picklable")


def test_reports_unpicklable_transform():
    local_state = UnpicklableObject()
    ds = _mp(_odd().map(lambda _: 1 if local_state is None else 2), 1)
    with pytest.raises(ValueError, match="UnpicklableObject is not picklable") as info:
        list(ds)
    assert any("cannot be pickled" in n for n in getattr(info.value, "__notes__", [])), info.value


@pytest.mark.parametrize("left_unpicklable", [True, False], ids=["both", "right_only"])
def test_reports_first_unpicklable_dataset(left_unpicklable):
    obj = UnpicklableObject()

    class PicklableTransform(grain.transforms.Map):
        def map(self, x):
            return x

    class LeftTransform(grain.transforms.Map):
        def map(self, x):
            return x if obj else x

    class RightTransform(grain.transforms.Map):
        def map(self, x):
            return x if obj else x

    left = grain.MapDataset.range(0, 10).map(
        LeftTransform() if left_unpicklable else PicklableTransform()
    )
    right = grain.MapDataset.range(10, 20).map(RightTransform())
    ds = grain.MapDataset.mix([left, right], [1.0, 1.0]).to_iter_dataset(
        read_options=grain.ReadOptions(prefetch_buffer_size=0)
    )
    with pytest.raises(ValueError, match="UnpicklableObject is not picklable") as info:
        list(_mp(ds, 1))
    notes = "".join(getattr(info.value, "__notes__", []))
    name = "LeftTransform" if left_unpicklable else "RightTransform"
    assert "cannot be pickled" in notes and name in notes, notes
