"""grain_core.stats: opt-in per-stage statistics that cost nothing when off."""

from __future__ import annotations

import time

import numpy as np
import pytest

import grain_core as grain
from grain_core import stats

_SLOW_SLEEP = 0.0005


def _slow(x):
    time.sleep(_SLOW_SLEEP)
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


def test_stage_counts_times_and_slowest_stage():
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
    # Which stage is slowest depends on the machine's load: check the definition, not the winner.
    assert s.slowest is max(s.stages, key=lambda st: st.self_s)
    slow = next(st for st in s.stages if st.name.startswith("MapMapDataset(_slow"))
    assert slow.elements == 400
    assert slow.total_s >= 400 * _SLOW_SLEEP  # every sleep is inside the measured time
    assert all(st.self_s <= st.total_s for st in s.stages)
    assert by_name["PrefetchIterDataset"].buffer_fill is not None
    assert 0.0 <= by_name["PrefetchIterDataset"].buffer_fill <= 1.0
    text = str(s)
    assert f"slowest stage: {s.slowest.name}" in text
    d = s.as_dict()
    assert d["slowest"] == s.slowest.name and len(d["stages"]) == len(s.stages)


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


# --- mp_prefetch: stages run in worker processes ---------------------------------------------------

_MP_SLEEP = 0.005
_MP_N = 160


def _slow_mp(x):
    time.sleep(_MP_SLEEP)
    return x


def _mp_pipeline(num_workers=2, slow=True):
    ds = grain.MapDataset.range(_MP_N)
    if slow:
        ds = ds.map(_slow_mp)
    return ds.to_iter_dataset(grain.ReadOptions(num_threads=2)).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=num_workers)
    )


def _by_name(s):
    return {st.name.split("(")[0]: st for st in s.stages}


def test_mp_prefetch_worker_stages_are_measured():
    it = stats.iter_with_stats(_mp_pipeline())
    try:
        early = it.stats()  # nothing received yet: only the mp_prefetch stage
        assert [st.workers for st in early.stages] == [0]
        out = list(it)
        s = it.stats()
    finally:
        it.close()
    assert out == list(range(_MP_N))
    root = s.stages[0]
    assert root.name.startswith("MultiprocessPrefetchIterDataset") and root.workers == 0
    assert root.elements == _MP_N
    by = _by_name(s)
    m = by["MapMapDataset"]
    assert m.workers == 2 and m.kind == "map" and m.depth > root.depth
    assert m.elements == _MP_N
    assert sorted(w["worker"] for w in m.per_worker) == [0, 1]
    assert [w["elements"] for w in m.per_worker] == [_MP_N // 2] * 2
    assert sum(w["total_s"] for w in m.per_worker) == pytest.approx(m.total_s)
    # Summed over the workers' read threads: every sleep happened inside the measured time (a
    # lower bound that load can only make truer; no upper bound, no comparison between stages).
    assert m.total_s >= _MP_N * _MP_SLEEP
    assert by["SourceMapDataset"].elements == _MP_N and by["SourceMapDataset"].workers == 2
    top = by["PrefetchIterDataset"]  # the workers' output stage
    assert top.workers == 2 and top.depth == root.depth + 1
    # The main process waits for the workers in parallel: their mean output time is theirs.
    assert root.self_s == pytest.approx(max(0.0, root.total_s - top.total_s / top.workers))
    assert s.slowest is max(s.stages, key=lambda st: st.self_s)
    text = str(s)
    assert "[2 workers]" in text and f"slowest stage: {s.slowest.name}" in text
    d = s.as_dict()
    assert [x["workers"] for x in d["stages"]] == [st.workers for st in s.stages]


def test_mp_prefetch_stats_off_sends_no_stats_messages(monkeypatch):
    from grain_core.runtime import api
    from grain_core.runtime import multiprocess as mpm

    kinds = []
    orig = api.RoundRobinConsumer._apply

    def apply(self, i, msg):
        kinds.append(type(msg).__name__)
        return orig(self, i, msg)

    monkeypatch.setattr(api.RoundRobinConsumer, "_apply", apply)
    ds = _mp_pipeline(slow=False)
    plain = iter(ds)
    try:
        off = list(plain)
        assert plain.worker_stats() is None and not hasattr(plain, "stats")
    finally:
        plain.close()
    assert "Elements" in kinds and "Stats" not in kinds
    kinds.clear()
    it = stats.iter_with_stats(ds)
    try:
        on = list(it)
    finally:
        it.close()
    assert on == off == list(range(_MP_N))
    assert "Stats" in kinds
    assert type(ds) is mpm.MultiprocessPrefetchIterDataset  # the dataset itself is untouched


def test_mp_prefetch_with_stats_checkpoints():
    ds = _mp_pipeline(slow=False)
    it = stats.iter_with_stats(ds)
    try:
        for _ in range(7):
            next(it)
        state = it.get_state()
        a = [next(it) for _ in range(5)]
        it.set_state(state)
        b = [next(it) for _ in range(5)]
        assert a == b == list(range(7, 12))
        assert _by_name(it.stats())["SourceMapDataset"].elements >= 12
    finally:
        it.close()


def test_mp_prefetch_without_workers_is_measured_in_process():
    it = stats.iter_with_stats(_mp_pipeline(num_workers=0, slow=False))
    assert list(it) == list(range(_MP_N))
    by = _by_name(it.stats())
    assert by["SourceMapDataset"].elements == _MP_N and by["SourceMapDataset"].workers == 0
