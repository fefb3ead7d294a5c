"""Regression tests for kernel edge cases found in review: edges, atomic set_state, early errors,
plugin registry and the conformance kit catching broken sources and iterators."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import grain_core as grain
from grain_core import plugins, testing
from grain_core import transforms as tr
from grain_core.dataset.batch_ops import FlatMapIterDataset
from grain_core.dataset.reshape_ops import RebatchIterDataset, ZipIterDataset
from grain_core.options import DatasetOptions
from grain_core.state import StateMismatchError
from grain_core.testing.compare import assert_elements_equal

M = grain.MapDataset


def _iter(n, start=0):
    return M.source(list(range(start, start + n))).to_iter_dataset(grain.ReadOptions(num_threads=0))


class _Repeat(tr.FlatMap):
    max_fan_out = 3

    def flat_map(self, x):
        return [x] * (x % 3)  # some elements expand to nothing


# --- edges -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: FlatMapIterDataset(_iter(5), _Repeat()),
        lambda: RebatchIterDataset(M.source(list(range(7))).batch(2).to_iter_dataset(), 3),
        lambda: RebatchIterDataset(
            M.source(list(range(7))).batch(2).to_iter_dataset(), 3, drop_remainder=True
        ),
    ],
)
def test_state_after_exhaustion_restores_to_exhaustion(make):
    it = iter(make())
    list(it)
    state = it.get_state()
    with pytest.raises(StopIteration):
        next(it)
    fresh = iter(make())
    fresh.set_state(state)  # used to raise StopIteration out of set_state
    assert list(fresh) == []
    assert it.get_state() == state


def test_rebatch_across_many_small_batches_and_restore_midway():
    ds = RebatchIterDataset(M.source(list(range(11))).batch(1).to_iter_dataset(), 4)
    it = iter(ds)
    assert [b.tolist() for b in it] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    testing.assert_equal_output_after_checkpoint(ds)


def test_slice_of_infinite_dataset_reads_the_same_in_bulk_and_singly():
    ds = M.source(list(range(5))).repeat()[:3]
    idx = list(range(8))
    assert ds.__getitems__(idx) == [ds[i] for i in idx]


def test_repeat_of_empty_dataset_is_empty():
    ds = M.source([]).repeat()
    assert len(ds) == 0 and list(ds) == []


def test_empty_selection_map_does_not_read_dataset_zero():
    ds = M.select_from_datasets([M.source([7, 8])], [])
    with pytest.raises(IndexError, match="empty selection map"):
        ds[0]


# --- early, explicit errors ------------------------------------------------------------------------


def test_non_callable_batch_fn_is_refused_at_construction():
    for make in (
        lambda: M.source([1, 2]).batch(2, batch_fn=5),
        lambda: _iter(2).batch(2, batch_fn="stack"),
        lambda: tr.Batch(2, batch_fn=3),
    ):
        with pytest.raises(TypeError, match="batch_fn must be a callable"):
            make()


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        ({"filter_warn_threshold_ratio": "0.5"}, TypeError),
        ({"filter_raise_threshold_ratio": True}, TypeError),
        ({"filter_check_min_elements": 1.5}, TypeError),
        ({"filter_check_min_elements": -1}, ValueError),
    ],
)
def test_dataset_options_types(kwargs, exc):
    with pytest.raises(exc, match="DatasetOptions"):
        DatasetOptions(**kwargs)


def test_mix_component_names_must_be_distinct_as_strings():
    with pytest.raises(ValueError, match="distinct"):
        grain.IterDataset.mix({1: _iter(2), "1": _iter(2)})


# --- states: refusal, atomicity ----------------------------------------------------------------------


def test_rebatch_refuses_another_batch_size():
    a = iter(RebatchIterDataset(M.source(list(range(7))).batch(2).to_iter_dataset(), 3))
    next(a)
    b = iter(RebatchIterDataset(M.source(list(range(7))).batch(2).to_iter_dataset(), 4))
    with pytest.raises(StateMismatchError, match="batch_size"):
        b.set_state(a.get_state())


def _advanced(ds, n):
    it = iter(ds)
    for _ in range(n):
        next(it)
    return it


@pytest.mark.parametrize(
    "make_a, make_b",
    [
        (
            lambda: _iter(10).random_map(lambda x, r: x, seed=1),
            lambda: _iter(10).random_map(lambda x, r: x, seed=2),
        ),
        (lambda: _iter(10).batch(2), lambda: _iter(10).batch(3)),
        (
            lambda: ZipIterDataset([_iter(10), _iter(10).batch(2)], strict=False),
            lambda: ZipIterDataset([_iter(10), _iter(10).batch(3)], strict=False),
        ),
        (
            lambda: grain.IterDataset.mix({"a": _iter(10), "b": _iter(10).batch(2)}),
            lambda: grain.IterDataset.mix({"a": _iter(10), "b": _iter(10).batch(3)}),
        ),
    ],
)
def test_refused_set_state_leaves_the_iterator_unchanged(make_a, make_b):
    state = _advanced(make_a(), 3).get_state()
    b = _advanced(make_b(), 1)
    before = b.get_state()
    expected = list(_advanced(make_b(), 1))
    with pytest.raises(StateMismatchError):
        b.set_state(state)
    assert b.get_state() == before
    assert_elements_equal(expected, list(b), "after a refused set_state")


def test_mix_restore_names_added_and_removed_components():
    # As Grain documents for named mixes: components are restored by name; a component the state
    # does not name keeps its position, a name the mix lacks is ignored.
    it = iter(grain.IterDataset.mix({"a": _iter(3), "b": _iter(3), "c": _iter(3)}))
    next(it)
    saved = it.get_state()
    two = iter(grain.IterDataset.mix({"a": _iter(3), "b": _iter(3)}))
    two.set_state(saved)
    assert two.get_state()["parents"]["a"] == saved["parents"]["a"]
    other = iter(grain.IterDataset.mix({"a": _iter(3), "c": _iter(3)}))
    fresh_c = other.get_state()["parents"]["c"]
    other.set_state(two.get_state())
    assert other.get_state()["parents"]["c"] == fresh_c
    # Unnamed mixes still refuse a state of another shape.
    with pytest.raises(StateMismatchError):
        iter(grain.IterDataset.mix([_iter(3), _iter(3)])).set_state(
            iter(grain.IterDataset.mix([_iter(3), _iter(3), _iter(3)])).get_state()
        )


# --- plugin registry ---------------------------------------------------------------------------------


def test_explicitly_registering_an_entry_point_plugin_is_harmless(fresh_plugins):
    fresh_plugins.ensure_loaded()
    module = sys.modules[fresh_plugins.plugins["range"].entry_point.split(":")[0]]
    plugins.register(module)
    assert len(grain.MapDataset.range(3)) == 3  # used to raise pluggy's "already registered"
    assert "range" in dir(grain.MapDataset)


# --- the conformance kit catches broken sources and iterators ----------------------------------------


class _Src:
    def __init__(self, n=20):
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        if not 0 <= i < self._n:
            raise IndexError(i)
        return i * 10


class _SortedBulk(_Src):
    def __getitems__(self, indices):
        return [self[i] for i in sorted(indices)]


class _Unpicklable(_Src):
    def __init__(self):
        super().__init__()
        self._lock = threading.Lock()


class _EmptyNoIndexError:
    def __len__(self):
        return 0

    def __getitem__(self, i):
        return None


def test_kit_accepts_a_good_source():
    testing.check_source(_Src())


@pytest.mark.parametrize(
    "source, match",
    [
        (_SortedBulk(), "__getitems__"),
        (_Unpicklable(), "pickle"),
        (_EmptyNoIndexError(), "empty source"),
    ],
)
def test_kit_catches_broken_sources(source, match):
    with pytest.raises(AssertionError, match=match):
        testing.check_source(source)


class _OffByOneIterDataset(grain.IterDataset):
    def __init__(self, n=10):
        super().__init__()
        self._n = n

    def __iter__(self):
        return _OffByOneIterator(self._n)


class _OffByOneIterator(grain.DatasetIterator):
    def __init__(self, n):
        super().__init__()
        self._n, self._i = n, 0

    def __next__(self):
        if self._i >= self._n:
            raise StopIteration
        self._i += 1
        return self._i - 1

    def get_state(self):
        return {"kind": "OffByOne", "i": self._i}

    def set_state(self, state):
        self._i = state["i"] + 1  # the bug


def test_kit_catches_an_off_by_one_restore():
    with pytest.raises(AssertionError, match="restored at step"):
        testing.assert_equal_output_after_checkpoint(_OffByOneIterDataset())


def test_kit_catches_a_non_json_state():
    class _NpState(_OffByOneIterator):
        def get_state(self):
            return {"kind": "NpState", "i": np.int64(self._i)}

    class _Ds(_OffByOneIterDataset):
        def __iter__(self):
            return _NpState(self._n)

    with pytest.raises(AssertionError, match="not JSON"):
        testing.assert_equal_output_after_checkpoint(_Ds())


# The half-registered plugin is tested with a real distribution in test_plugin_hardening.py.
