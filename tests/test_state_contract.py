"""The state contract: JSON states, exact restore, refusal of states from other pipelines."""

import json
import logging
import warnings

import numpy as np
import pytest

import grain_core as grain
from grain_core import state as st
from grain_core import testing


def _pipelines():
    R = grain.MapDataset.range
    yield R(60).seed(1).shuffle().map(lambda x: x + 1).to_iter_dataset()
    yield R(60).filter(lambda x: x % 3).batch(4).to_iter_dataset(grain.ReadOptions(num_threads=2))
    yield R(60).to_iter_dataset().filter(lambda x: x % 4).batch(3, drop_remainder=True)
    yield R(30).seed(2).random_map(lambda x, r: x + int(r.integers(9))).repeat(2).to_iter_dataset()
    yield R(40).to_iter_dataset().seed(3).random_map(lambda x, r: x * int(r.integers(9))).map_with_index(lambda i, x: (i, x))
    yield grain.IterDataset.mix([R(20).to_iter_dataset(), R(100, 130).to_iter_dataset()], [2, 1])
    yield grain.MapDataset.mix([R(20).seed(4).shuffle(), R(100, 130)], [1, 3]).to_iter_dataset()
    yield grain.experimental.LimitIterDataset(R(50).to_iter_dataset(), 17)
    yield grain.experimental.RebatchIterDataset(R(50).batch(7).to_iter_dataset(), 5)
    yield grain.experimental.ZipIterDataset(
        [R(9).to_iter_dataset(), R(5, 20).to_iter_dataset()], strict=False
    )
    yield grain.MapDataset.concatenate([R(5), R(10, 14)])[1::2].to_iter_dataset()


@pytest.mark.parametrize("ds", list(_pipelines()), ids=lambda d: type(d).__name__)
def test_restore_is_exact(ds):
    testing.assert_equal_output_after_checkpoint(ds)


def test_state_is_json_and_small():
    # Positions plus a short description of each stage (so that a refused state names the field
    # that differs), never element data: the size does not depend on the elements.
    sizes = []
    for n in (10, 100_000):
        ds = grain.MapDataset.range(10**6).map(lambda x, n=n: np.zeros(n)).batch(8)
        it = iter(ds.to_iter_dataset())
        next(it)
        sizes.append(len(json.dumps(it.get_state())))
    assert sizes[0] == sizes[1] < 600


def test_state_from_other_pipeline_is_refused():
    a = iter(grain.MapDataset.range(100).shuffle(seed=1).to_iter_dataset())
    b = iter(grain.MapDataset.range(100).shuffle(seed=2).to_iter_dataset())
    c = iter(grain.MapDataset.range(100).to_iter_dataset().batch(2))
    next(a)
    before = b.get_state()
    with pytest.raises(st.StateMismatchError, match="different pipeline"):
        b.set_state(a.get_state())
    assert b.get_state() == before
    with pytest.raises(st.StateMismatchError, match="BatchIterDataset"):
        a.set_state(c.get_state())
    with pytest.raises(TypeError, match="expects the dict"):
        a.set_state("nope")


def test_state_of_other_length_refused():
    a = iter(grain.MapDataset.range(100).to_iter_dataset())
    b = iter(grain.MapDataset.range(101).to_iter_dataset())
    with pytest.raises(st.StateMismatchError):
        b.set_state(a.get_state())


def test_restore_after_exhaustion_and_threads():
    ds = grain.MapDataset.range(25).map(lambda x: x * 3).to_iter_dataset(
        grain.ReadOptions(num_threads=3, prefetch_buffer_size=4)
    )
    it = iter(ds)
    out = list(it)
    end = it.get_state()
    it2 = iter(ds)
    it2.set_state(end)
    assert list(it2) == []
    it2.set_state({**end, "next_index": 10})
    assert list(it2) == out[10:]


def test_filter_warning_and_raise_thresholds(caplog):
    ds = grain.MapDataset.range(3000).filter(lambda x: x % 20 == 0).to_iter_dataset()
    # As in Grain, the warning is logged (caplog / assertLogs capture it), not a warnings.warn.
    with caplog.at_level(logging.WARNING), warnings.catch_warnings():
        warnings.simplefilter("error")
        list(ds)
    assert [r.levelno for r in caplog.records if "skipped" in r.getMessage()] == [logging.WARNING]
    assert "% of the last seen" in caplog.records[-1].getMessage()
    strict = grain.experimental.WithOptionsIterDataset(
        ds, grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.5)
    )
    with pytest.raises(ValueError, match="filter_raise_threshold_ratio"):
        list(strict)
    quiet = grain.experimental.WithOptionsIterDataset(
        grain.MapDataset.range(3000).to_iter_dataset().filter(lambda x: x % 20 == 0),
        grain.experimental.DatasetOptions(filter_warn_threshold_ratio=None, filter_raise_threshold_ratio=0.5),
    )
    with pytest.raises(ValueError, match="filter_raise_threshold_ratio"):
        list(quiet)


def test_error_in_map_surfaces_at_the_element():
    def boom(x):
        if x == 37:
            raise RuntimeError("bad element 37")
        return x

    it = iter(grain.MapDataset.range(100).map(boom).to_iter_dataset(grain.ReadOptions(num_threads=2)))
    got = []
    with pytest.raises(RuntimeError, match="bad element 37"):
        for x in it:
            got.append(x)
    assert got == list(range(37))
    it.close()


def test_iter_filter_that_drops_everything_raises_before_the_end():
    seen = []
    ds = grain.MapDataset.range(100_000).to_iter_dataset().map(lambda x: seen.append(x) or x)
    strict = grain.experimental.WithOptionsIterDataset(
        ds.filter(lambda x: False),
        grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.5),
    )
    with pytest.raises(ValueError, match="filter_raise_threshold_ratio"):
        list(strict)
    assert len(seen) < 100_000  # refused early, not after reading everything


# Recorded from google grain 0.2.18 (IterDataset filter over range, raise threshold): whether the
# filter check raised. Grain checks windows of 1000 elements and starts each window afresh.
_GRAIN_FILTER_WINDOWS = {
    # (elements passing first, elements dropped after them, raise threshold): raised
    (1000, 1000, 0.9): True,
    (3000, 1000, 0.9): True,
    (0, 999, 1.0): False,
    (500, 1000, 0.5): True,
    (2000, 100, 0.2): False,
}


@pytest.mark.parametrize("case", sorted(_GRAIN_FILTER_WINDOWS))
def test_filter_ratio_is_checked_per_window_as_grain(case):
    """A heavily filtered stretch after a clean one raises (a cumulative ratio would dilute it)."""
    n_pass, n_drop, threshold = case
    ds = grain.MapDataset.range(n_pass + n_drop + 500).to_iter_dataset().filter(
        lambda x: not (n_pass <= x < n_pass + n_drop)
    )
    ds = grain.experimental.WithOptionsIterDataset(
        ds, grain.experimental.DatasetOptions(filter_raise_threshold_ratio=threshold)
    )
    try:
        list(ds)
        raised = False
    except ValueError as e:
        assert "% of the last seen" in str(e)
        raised = True
    assert raised == _GRAIN_FILTER_WINDOWS[case]
