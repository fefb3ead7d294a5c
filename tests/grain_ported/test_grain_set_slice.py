"""Grain 0.2.18's ``set_slice`` unit tests for sources, ported to grain_core's public API.

Ported from ``grain/_src/python/dataset/transformations/source_test.py``:
``SourceMapDatasetTest.test_set_slice``, ``SourceMapDatasetTest.test_set_slice_raises_for_non_sequential_slice``,
``RangeMapDatasetTest.test_set_slice``, ``RangeMapDatasetTest.test_set_slice_raises_for_non_sequential_slice``
and ``RangeMapDatasetTest.test_element_spec``.
"""

from __future__ import annotations

import numpy as np
import pytest

import grain_core as grain

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    "make",
    [lambda: grain.MapDataset.source(range(21)), lambda: grain.MapDataset.range(21)],
    ids=["source", "range"],
)
def test_set_slice(make):
    ds = make()
    ds.set_slice(slice(2, None, 3), sequential_slice=True)  # worker 2 of 3
    assert list(ds) == [14, 15, 16, 17, 18, 19, 20]
    assert len(ds) == 7 and ds[7] == 14  # index modulo the block, as a source reads


@pytest.mark.parametrize(
    "make",
    [lambda: grain.MapDataset.source(range(3)), lambda: grain.MapDataset.range(10)],
    ids=["source", "range"],
)
def test_set_slice_raises_for_non_sequential_slice(make):
    with pytest.raises(AssertionError):
        make().set_slice(slice(0, 1, 1), sequential_slice=False)


def test_set_slice_again_slices_the_original_source():
    ds = grain.MapDataset.source(list(range(10)))
    ds.set_slice(slice(0, None, 2), sequential_slice=True)
    assert list(ds) == [0, 1, 2, 3, 4]
    ds.set_slice(slice(1, None, 2), sequential_slice=True)
    assert list(ds) == [5, 6, 7, 8, 9]


def test_range_element_spec():
    spec = grain.experimental.get_element_spec(grain.MapDataset.range(12))
    assert spec.shape == () and spec.dtype == np.int64
