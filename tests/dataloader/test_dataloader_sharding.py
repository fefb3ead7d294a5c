"""ShardOptions, NoSharding, ShardByJaxProcess and the contiguous shard helper."""

from __future__ import annotations

import pickle
import sys

import pytest

import grain_core as grain
from grain_core.sharding import shard_bounds


def test_shard_options_fields_and_repr():
    s = grain.ShardOptions(shard_index=1, shard_count=4, drop_remainder=False)
    assert (s.shard_index, s.shard_count, s.drop_remainder) == (1, 4, False)
    assert repr(grain.NoSharding()) == "NoSharding(shard_index=0, shard_count=1, drop_remainder=False)"
    n = grain.NoSharding()
    assert (n.shard_index, n.shard_count, n.drop_remainder) == (0, 1, False)


@pytest.mark.parametrize(
    "index,count", [(4, 4), (5, 4), (-1, 4), (0, 0), (0, -2)]
)
def test_bad_shard_options(index, count):
    with pytest.raises(ValueError, match="shard_"):
        grain.ShardOptions(shard_index=index, shard_count=count)


def test_shard_options_types():
    with pytest.raises(TypeError):
        grain.ShardOptions(shard_index=0.5, shard_count=2)


def test_shard_by_jax_process():
    pytest.importorskip("jax")
    s = grain.ShardByJaxProcess(drop_remainder=True)
    assert (s.shard_index, s.shard_count, s.drop_remainder) == (0, 1, True)
    assert repr(s) == "ShardByJaxProcess(drop_remainder=True)"
    assert repr(pickle.loads(pickle.dumps(s))) == repr(s)


def test_shard_by_jax_process_without_jax(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(ImportError, match=r"grain-core-kernel\[jax\]"):
        grain.ShardByJaxProcess()


@pytest.mark.parametrize("n", [0, 1, 7, 10, 11, 100])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 13])
def test_shard_bounds_disjoint_and_covering(n, count):
    bounds = [shard_bounds(n, i, count) for i in range(count)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    for (a0, a1), (b0, _b1) in zip(bounds, bounds[1:]):
        assert a1 == b0 and a0 <= a1
    sizes = [e - s for s, e in bounds]
    assert max(sizes) - min(sizes) <= 1
    dropped = [shard_bounds(n, i, count, True) for i in range(count)]
    assert {e - s for s, e in dropped} == {n // count}
    assert all(a1 == b0 for (_, a1), (b0, _) in zip(dropped, dropped[1:]))


def test_shard_options_in_a_dataset_pipeline():
    # Seed 002: slice-based sharding in a Dataset pipeline.
    shard = grain.ShardOptions(shard_index=1, shard_count=4, drop_remainder=False)
    ds = grain.MapDataset.source(list(range(10))).shuffle(seed=0)[
        shard.shard_index :: shard.shard_count
    ]
    parts = [
        set(grain.MapDataset.source(list(range(10))).shuffle(seed=0)[i::4]) for i in range(4)
    ]
    assert set(ds) == parts[1]
    assert set().union(*parts) == set(range(10))
    assert sum(len(p) for p in parts) == 10
