"""Grain 0.2.18's zip unit tests, ported to grain_core's public API (plain pytest).

Ported from ``grain/_src/python/dataset/transformations/zip_test.py``: every test of
``ZipMapDatasetTest`` (len, getitem, getitems, element spec, dicts) and ``ZipIterDatasetTest``
(iter, strict zip shorter / shorter-many / longer-many with Grain's exact messages, non-strict zip,
checkpointing, element spec).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing

pytestmark = pytest.mark.timeout(120)

ZipMap = grain.experimental.ZipMapDataset
ZipIter = grain.experimental.ZipIterDataset

_COMBOS = [c for k in (3, 2, 1) for c in itertools.combinations(range(3), k)]


def _sources():
    return [grain.MapDataset.range(i, 20 + i) for i in range(3)]


@pytest.mark.parametrize("idx", _COMBOS)
def test_map_len_getitem_getitems(idx):
    ds = ZipMap(parents=[_sources()[i] for i in idx])
    assert len(ds) == 20
    for i in range(20):
        assert ds[i] == tuple(i + j for j in idx)
    indices = [0, 5, 19]
    assert ds.__getitems__(indices) == [ds[i] for i in indices]


def test_map_element_spec():
    specs = grain.experimental.get_element_spec(
        ZipMap(parents=[grain.MapDataset.range(2), grain.MapDataset.range(2)])
    )
    assert all(s.dtype == np.int64 and s.shape == () for s in specs)


def test_map_dict():
    s1 = grain.MapDataset.source([{"a": [1, 2]}, {"b": [3]}, {"c": [4, 5, 6]}])
    s2 = grain.MapDataset.source([{"d": [7]}, {"e": [8, 9]}, {"f": [10, 11, 12]}])
    assert list(ZipMap(parents=[s1, s2])) == [
        ({"a": [1, 2]}, {"d": [7]}),
        ({"b": [3]}, {"e": [8, 9]}),
        ({"c": [4, 5, 6]}, {"f": [10, 11, 12]}),
    ]


@pytest.mark.parametrize("idx", _COMBOS)
def test_iter(idx):
    out = list(ZipIter(parents=[_sources()[i].to_iter_dataset() for i in idx]))
    assert out == [tuple(i + j for j in idx) for i in range(20)]


@pytest.mark.parametrize(
    "lengths, message",
    [
        ((3, 2), "ZipIterDataset argument 2 is shorter than argument 1"),
        ((3, 3, 2), "ZipIterDataset argument 3 is shorter than arguments 1-2"),
        ((2, 2, 2, 3), "ZipIterDataset argument 4 is longer than arguments 1-3"),
    ],
    ids=["shorter", "shorter_many", "longer_many"],
)
def test_strict_zip(lengths, message):
    ds = ZipIter(
        parents=[grain.MapDataset.range(n).to_iter_dataset() for n in lengths], strict=True
    )
    with pytest.raises(ValueError) as info:
        list(ds)
    assert str(info.value) == message


def test_non_strict_zip():
    ds = ZipIter(
        parents=[
            grain.MapDataset.range(2).to_iter_dataset(),
            grain.MapDataset.range(1, 4).to_iter_dataset(),
        ],
        strict=False,
    )
    assert list(ds) == [(0, 1), (1, 2)]


def test_checkpointing():
    testing.assert_equal_output_after_checkpoint(
        ZipIter(parents=[p.to_iter_dataset() for p in _sources()])
    )


def test_iter_element_spec():
    specs = grain.experimental.get_element_spec(
        ZipIter(parents=[grain.MapDataset.range(2).to_iter_dataset()] * 2)
    )
    assert all(s.dtype == np.int64 and s.shape == () for s in specs)
