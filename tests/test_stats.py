"""grain_core.stats: opt-in per-stage statistics that cost nothing when off."""

from __future__ import annotations

import time

import numpy as np
import pytest

import grain_core as grain
from grain_core import stats


def _slow(x):
    time.sleep(0.0005)
    return x


def _pipeline(slow=False):
    ds = grain.MapDataset.range(400).seed(1).shuffle()
    if slow:
        ds = ds.map(_slow)
    return ds.map(lambda x: x * 2).batch(8).to_iter_dataset(grain.ReadOptions(num_threads=2)).map(
        lambda b: b + 1
    )


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_same_elements_as_plain_iteration():
    ds = _pipeline()
    _same(list(stats.iter_with_stats(ds)), list(iter(ds)))


def test_dataset_and_plain_iterators_are_untouched():
    ds = _pipeline()
    classes = []
    d = ds
    while True:
        classes.append(type(d))
        if not d.parents:
            break
        d = d.parents[0]
    it = stats.iter_with_stats(ds)
    next(it)
    d = ds
    for cls in classes:
        assert type(d) is cls
        if d.parents:
            d = d.parents[0]
    plain = iter(ds)
    assert not hasattr(plain, "stats")
    assert "__next__" not in type(plain).__dict__ or type(plain).__module__.startswith("grain_core.dataset")
    with pytest.raises(ValueError, match="iter_with_stats"):
        stats.collect(plain)


def test_stage_counts_and_slowest_stage():
    it = stats.iter_with_stats(_pipeline(slow=True))
    out = list(it)
    assert len(out) == 50
    s = it.stats()
    names = [st.name for st in s.stages]
    assert names[0].startswith("MapIterDataset")
    assert s.stages[0].elements == 50
    by_name = {st.name.split("(")[0]: st for st in s.stages}
    assert by_name["BatchMapDataset"].elements == 50
    assert by_name["SourceMapDataset"].elements == 400
    assert s.slowest.name.startswith("MapMapDataset(_slow")
    assert by_name["PrefetchIterDataset"].buffer_fill is not None
    assert 0.0 <= by_name["PrefetchIterDataset"].buffer_fill <= 1.0
    text = str(s)
    assert "slowest stage: MapMapDataset(_slow" in text
    d = s.as_dict()
    assert d["slowest"].startswith("MapMapDataset(_slow") and len(d["stages"]) == len(s.stages)


def test_collect_equals_method_and_checkpoint_still_works():
    ds = _pipeline()
    it = stats.iter_with_stats(ds)
    next(it)
    state = it.get_state()
    a = [next(it) for _ in range(3)]
    it.set_state(state)
    b = [next(it) for _ in range(3)]
    _same(a, b)
    assert [x.name for x in stats.collect(it).stages] == [x.name for x in it.stats().stages]
    plain = iter(ds)
    plain.set_state(state)
    _same([next(plain) for _ in range(3)], a)


def test_iter_dataset_chain_with_filter_and_mix():
    a = grain.MapDataset.range(50).to_iter_dataset()
    b = grain.MapDataset.range(50, 100).to_iter_dataset().filter(lambda x: x % 2 == 0)
    ds = grain.IterDataset.mix([a, b], [0.5, 0.5])
    it = stats.iter_with_stats(ds)
    out = list(it)
    assert out == list(ds)
    s = it.stats()
    assert s.stages[0].elements == len(out)
    assert any(st.name.startswith("FilterIterDataset") for st in s.stages)
