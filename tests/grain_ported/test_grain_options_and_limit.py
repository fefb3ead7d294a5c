"""Grain 0.2.18's unit tests for options and limit, ported to grain_core's public API (plain pytest).

Ported from ``grain/_src/python/options_test.py`` (ReadOptions validation and warnings),
``grain/_src/python/dataset/base_test.py`` (``DatasetOptionsTest.test_example_docstring_for_merge``,
``DatasetOptionsTest.test_merge``, ``RandomAccessDataSourceTest.test_example_docstring``,
``DatasetSelectionMapTest.test_example_docstring``) and
``grain/_src/python/dataset/transformations/limit_test.py`` (every test of
``LimitIterDatasetTest``).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing

pytestmark = pytest.mark.timeout(120)

DatasetOptions = grain.experimental.DatasetOptions
Limit = grain.experimental.LimitIterDataset


# ----- options_test.py ---------------------------------------------------------------------------


def test_read_options_defaults_and_values():
    ro = grain.ReadOptions(num_threads=2, prefetch_buffer_size=500)
    assert ro.num_threads == 2 and ro.prefetch_buffer_size == 500


def test_num_threads_negative_raises_value_error():
    with pytest.raises(ValueError, match="num_threads must be non-negative"):
        grain.ReadOptions(num_threads=-1)


def test_prefetch_buffer_size_negative_raises_value_error():
    with pytest.raises(ValueError, match="prefetch_buffer_size must be non-negative"):
        grain.ReadOptions(prefetch_buffer_size=-1)


def test_prefetch_buffer_size_less_than_num_threads_logs_warning(caplog):
    with caplog.at_level(logging.WARNING):
        grain.ReadOptions(num_threads=10, prefetch_buffer_size=5)
    assert any(
        "prefetch_buffer_size=5 is smaller than num_threads=10" in r.getMessage()
        for r in caplog.records
    )


def test_prefetch_buffer_size_zero_logs_nothing(caplog):
    with caplog.at_level(logging.WARNING):
        grain.ReadOptions(num_threads=10, prefetch_buffer_size=0)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ----- base_test.py ------------------------------------------------------------------------------


def test_example_docstring_for_merge():
    opt1 = DatasetOptions(min_shm_size=1024)
    opt2 = DatasetOptions(min_shm_size=512, filter_warn_threshold_ratio=None)
    merged = opt1.merge(opt2)
    assert merged.min_shm_size == 1024
    assert merged.filter_warn_threshold_ratio is None


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (  # no_conflicts
            DatasetOptions(filter_warn_threshold_ratio=0.1),
            DatasetOptions(filter_raise_threshold_ratio=0.2),
            DatasetOptions(filter_warn_threshold_ratio=0.1, filter_raise_threshold_ratio=0.2),
        ),
        (  # all_fields_default
            DatasetOptions(),
            DatasetOptions(filter_warn_threshold_ratio=0.4, filter_raise_threshold_ratio=0.3),
            DatasetOptions(filter_warn_threshold_ratio=0.4, filter_raise_threshold_ratio=0.3),
        ),
        (  # field_conflict
            DatasetOptions(filter_raise_threshold_ratio=0.1),
            DatasetOptions(filter_raise_threshold_ratio=0.2),
            DatasetOptions(filter_raise_threshold_ratio=0.1),
        ),
    ],
    ids=["no_conflicts", "all_fields_default", "field_conflict"],
)
def test_merge(a, b, expected):
    assert a.merge(b) == expected


def test_random_access_data_source_protocol_example():
    class MyInMemorySource:
        def __init__(self, data):
            self._data = data

        def __len__(self):
            return len(self._data)

        def __getitem__(self, index):
            return self._data[index]

    assert isinstance(MyInMemorySource(["a", "b", "c"]), grain.sources.RandomAccessDataSource)


def test_dataset_selection_map_example():
    class ConcatMap(grain.transforms.DatasetSelectionMap):
        def __len__(self):
            return 5

        def __getitem__(self, index):
            return (0, index) if index < 2 else (1, index - 2)

    cmap = ConcatMap()
    assert len(cmap) == 5 and cmap[3] == (1, 1)


# ----- limit_test.py -----------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, -1, -5])
def test_non_positive_count_raises_error(count):
    with pytest.raises(ValueError):
        Limit(grain.MapDataset.range(0, 10).to_iter_dataset(), count=count)


def test_stop_iteration_raised_after_limit_reached():
    it = iter(Limit(grain.MapDataset.range(0, 10).to_iter_dataset(), count=1))
    next(it)
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("count", [1, 3, 5, 7, 10])
def test_count(count):
    assert list(Limit(grain.MapDataset.range(0, 10).to_iter_dataset(), count=count)) == list(
        range(count)
    )


def test_count_over_epochs():
    ds = Limit(grain.MapDataset.range(0, 10).repeat(2).to_iter_dataset(), count=15)
    assert list(ds) == list(range(10)) + list(range(5))


def test_limit_after_batch():
    ds = grain.MapDataset.range(0, 10).batch(3).to_iter_dataset()
    assert [x for b in Limit(ds, count=2) for x in b.tolist()] == list(range(6))
    batches = list(Limit(ds, count=5))
    assert len(batches) == 4 and [x for b in batches for x in b.tolist()] == list(range(10))


def test_checkpointing():
    ds = Limit(grain.MapDataset.range(0, 10).batch(3).to_iter_dataset(), count=2)
    testing.assert_equal_output_after_checkpoint(ds)


def test_element_spec():
    spec = grain.experimental.get_element_spec(
        Limit(grain.MapDataset.range(0, 10).to_iter_dataset(), count=2)
    )
    assert spec.dtype == np.int64 and spec.shape == ()


def test_get_next_index():
    it = iter(Limit(grain.MapDataset.range(0, 20).batch(3).to_iter_dataset(), count=2))
    assert grain.experimental.get_next_index(it) == 0
    next(it)
    assert grain.experimental.get_next_index(it) == 1
    next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert grain.experimental.get_next_index(it) == 2


def test_set_next_index():
    it = iter(Limit(grain.MapDataset.range(0, 20).batch(3).to_iter_dataset(), count=2))
    grain.experimental.set_next_index(it, 1)
    assert grain.experimental.get_next_index(it) == 1
    next(it)
    assert grain.experimental.get_next_index(it) == 2
    with pytest.raises(StopIteration):
        next(it)
