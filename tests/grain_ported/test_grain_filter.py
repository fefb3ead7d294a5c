"""Grain 0.2.18's filter unit tests, ported to grain_core's public API (plain pytest).

Ported from ``grain/_src/python/dataset/transformations/filter_test.py``: every test of
``FilterMapDatasetTest`` and ``FilterIterDatasetTest`` (including the warning and the error of the
filter-ratio check, with Grain's wording), and ``FilterValidatorTest`` (validates / warns / raises)
through ``grain_core.dataset.filter_ratio.FilterRatioCheck``, grain_core's equivalent of Grain's
private ``FilterThresholdChecker``.
"""

from __future__ import annotations

import itertools
import logging
import re

import numpy as np
import pytest

import grain_core as grain
from grain_core.dataset.filter_ratio import FilterRatioCheck

pytestmark = pytest.mark.timeout(120)

DatasetOptions = grain.experimental.DatasetOptions


class FilterNoElements(grain.transforms.Filter):
    def filter(self, element):
        return True


class FilterAllElements(grain.transforms.Filter):
    def filter(self, element):
        return False


class FilterEvenElementsOnly(grain.transforms.Filter):
    def filter(self, element):
        return element % 2


def _r():
    return grain.MapDataset.range(0, 10)


def test_map_filter_size_and_elements():
    for f in (FilterNoElements(), FilterAllElements(), FilterEvenElementsOnly()):
        assert len(_r().filter(f)) == 10
    ds = _r().filter(FilterNoElements())
    assert [ds[i] for i in range(10)] == list(range(10))
    ds = _r().filter(FilterAllElements())
    assert [ds[i] for i in range(10)] == [None] * 10
    ds = _r().filter(FilterEvenElementsOnly())
    assert [ds[i] for i in range(10)] == list(
        itertools.chain.from_iterable([[None, i + 1] for i in range(0, 10, 2)])
    )


def test_map_filter_getitems():
    ds = _r().filter(FilterEvenElementsOnly())
    assert ds.__getitems__([0, 1, 4, 5, 8, 9]) == [None, 1, None, 5, None, 9]


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_element_spec(kind):
    ds = _r() if kind == "map" else _r().to_iter_dataset()
    spec = grain.experimental.get_element_spec(ds.filter(FilterEvenElementsOnly()))
    assert spec.shape == () and spec.dtype == np.int64


def test_iter_filter_elements():
    it = iter(_r().to_iter_dataset().filter(FilterNoElements()))
    assert [next(it) for _ in range(10)] == list(range(10))
    with pytest.raises(StopIteration):
        next(iter(_r().to_iter_dataset().filter(FilterAllElements())))
    it = iter(_r().to_iter_dataset().filter(FilterEvenElementsOnly()))
    assert [next(it) for _ in range(5)] == list(range(1, 10, 2))


_MESSAGE = (
    r"Transformation FilterDatasetIterator\(transform=FilterAllElements\) skipped 100.00 % of "
    r"the last seen 1000 elements."
)


def test_filter_all_elements_warns(caplog):
    ds = grain.MapDataset.range(0, 1000).to_iter_dataset().filter(FilterAllElements())
    with caplog.at_level(logging.WARNING):
        assert list(ds) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(re.search(_MESSAGE, w) for w in warnings), warnings


def test_filter_all_elements_raises():
    ds = grain.MapDataset.range(0, 1000).to_iter_dataset().filter(FilterAllElements())
    ds = grain.experimental.WithOptionsIterDataset(
        ds, DatasetOptions(filter_raise_threshold_ratio=0.999)
    )
    with pytest.raises(ValueError, match=_MESSAGE):
        list(ds)


def test_validator_validates():
    check = FilterRatioCheck("test")
    for p in [True] * 101 + [False] * 899 + [True] * 100 + [False] * 900:
        check.record(0 if p else 1, 1, DatasetOptions())


def test_validator_warns(caplog):
    check = FilterRatioCheck("test")
    with caplog.at_level(logging.WARNING):
        for p in [True] + [False] * 1000:
            check.record(0 if p else 1, 1, DatasetOptions())
    assert any(
        re.search(
            r"Transformation test skipped 99.90 % of the last seen 1000 elements.", r.getMessage()
        )
        for r in caplog.records
    )


def test_validator_raises():
    check = FilterRatioCheck("test")
    options = DatasetOptions(filter_warn_threshold_ratio=None, filter_raise_threshold_ratio=0.999)
    with pytest.raises(
        ValueError, match=r"Transformation test skipped 100.00 % of the last seen 1000 elements."
    ):
        for _ in range(1000):
            check.record(1, 1, options)
