"""Grain 0.2.18's DataLoader unit tests, ported to grain_core's public API (plain pytest).

Ported from ``grain/_src/python/data_loader_test.py`` (``DataLoaderTest``): ``test_fails_to_pickle``
(an unpicklable transform's own error reaches the caller), ``test_propagates_transform_error_with_multiprocessing``,
``test_reports_multiprocessing_worker_crash`` (a worker calling ``sys.exit(123)`` is reported with
Grain's wording "was terminated unexpectedly with exit code 123"), ``test_data_loader_single_process``,
``..._random_map``, ``..._legacy_operations``, ``..._iterate_twice``,
``test_data_loader_in_memory_data_source``, ``test_data_loader_two_processes_*``,
``test_data_loader_remote_exception``, ``test_data_loader_with_invalid_number_of_workers``
(with a range source instead of Grain's test ArrayRecord files),
``test_batch_transform_mapped_to_batch_operation``, ``test_data_loader_with_batch_fn``,
``test_state_without_in_memory_data``, ``test_data_loader_with_flat_map``.

Every test runs under a pytest-timeout bound: a worker that hangs fails the test instead of
hanging the suite.
"""

from __future__ import annotations

import functools
import sys

import numpy as np
import pytest

import grain_core as grain
from grain_core.python import BatchOperation, FilterOperation, MapOperation

pytestmark = pytest.mark.timeout(300)


class FilterEven(grain.transforms.Filter):
    def filter(self, x):
        return x % 2 == 0


class PlusOne(grain.transforms.Map):
    def map(self, x):
        return x + 1


class PlusRandom(grain.transforms.RandomMap):
    def random_map(self, x, rng):
        return x + rng.integers(100_000)


class FailingMap(grain.transforms.Map):
    def map(self, x):
        return 1 / 0


class NonPickableTransform(grain.transforms.Map):
    def __getstate__(self):
        raise ValueError("I shall not be pickled")

    def map(self, x):
        return x


class RaisingTransform(grain.transforms.Map):
    def map(self, x):
        raise AttributeError("I shall raise")


class ExitingTransform(grain.transforms.Map):
    def map(self, x):
        sys.exit(123)


class DuplicateElementFlatMap(grain.transforms.FlatMap):
    max_fan_out = 7

    def flat_map(self, element):
        for _ in range(self.max_fan_out):
            yield element


def map_function(data):
    return data + 1


def condition_function(data):
    return data % 2 == 0


def _loader(operations, *, worker_count=0, seed=None, source=None):
    source = grain.sources.RangeDataSource(start=0, stop=8, step=1) if source is None else source
    sampler = grain.samplers.SequentialSampler(
        num_records=len(source), shard_options=grain.sharding.NoSharding(), seed=seed
    )
    return grain.DataLoader(
        data_source=source, sampler=sampler, operations=operations, worker_count=worker_count
    )


EXPECTED = [np.array([2, 4]), np.array([6, 8])]


def test_fails_to_pickle():
    with pytest.raises(ValueError, match="I shall not be pickled"):
        list(_loader([NonPickableTransform()], worker_count=2))


def test_propagates_transform_error_with_multiprocessing():
    with pytest.raises(Exception, match="I shall raise"):
        list(_loader([RaisingTransform()], worker_count=2))


def test_reports_multiprocessing_worker_crash():
    with pytest.raises(RuntimeError, match="was terminated unexpectedly with exit code 123"):
        list(_loader([ExitingTransform()], worker_count=2))


def test_data_loader_remote_exception():
    with pytest.raises(ZeroDivisionError):
        list(_loader([FailingMap()], worker_count=2))


@pytest.mark.parametrize(
    "operations",
    [
        [PlusOne(), FilterEven(), BatchOperation(batch_size=2)],
        [
            MapOperation(map_function=map_function),
            FilterOperation(condition_function=condition_function),
            BatchOperation(batch_size=2),
        ],
        [PlusOne(), FilterEven(), grain.transforms.Batch(batch_size=2)],
    ],
    ids=["transforms", "legacy_operations", "batch_transform"],
)
def test_data_loader_single_process(operations):
    loader = _loader(operations)
    np.testing.assert_equal(list(loader), EXPECTED)
    np.testing.assert_equal(list(loader), EXPECTED)  # iterate twice


def test_data_loader_single_process_random_map():
    out = list(_loader([PlusRandom(), BatchOperation(batch_size=2)], seed=1))
    assert len(out) == 4 and all(b.shape == (2,) for b in out)


@pytest.mark.parametrize("in_memory", [False, True], ids=["range", "shared_memory"])
def test_data_loader_two_processes(in_memory):
    source = grain.sources.SharedMemoryDataSource(list(range(8))) if in_memory else None
    loader = _loader(
        [PlusOne(), FilterEven(), BatchOperation(batch_size=2)], worker_count=2, source=source
    )
    np.testing.assert_equal(list(loader), EXPECTED)
    if in_memory:
        source.close()
        source.unlink()


def test_data_loader_with_invalid_number_of_workers():
    with pytest.raises(ValueError):
        _loader([], worker_count=-1)


def test_data_loader_with_batch_fn():
    batch_fn = functools.partial(grain.experimental.batch_and_pad, batch_size=3)
    out = list(_loader([PlusOne(), FilterEven(), BatchOperation(batch_size=3, batch_fn=batch_fn)]))
    np.testing.assert_equal(out, [np.array([2, 4, 6]), np.array([8, 0, 0])])


def test_state_without_in_memory_data():
    data = list(range(10000))
    loader = grain.DataLoader(
        data_source=data, sampler=grain.samplers.SequentialSampler(num_records=len(data))
    )
    assert len(iter(loader).get_state()) < 1000


def test_data_loader_with_flat_map():
    out = list(_loader([PlusOne(), FilterEven(), DuplicateElementFlatMap()]))
    assert out == [2] * 7 + [4] * 7 + [6] * 7 + [8] * 7
