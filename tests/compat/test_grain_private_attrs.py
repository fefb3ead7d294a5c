"""Custom stages written for Grain read the private attributes Grain's base classes give them
(``grain_core/dataset/grain_attrs.py``): ``_parent``, ``_parents``, ``_ctx``, ``_stats``,
``_closed``; their states and checkpoints restore exactly."""

from __future__ import annotations

import pickle

import pytest

import grain_core as grain
from grain_core import testing
from grain_core.dataset import grain_attrs


class Window(grain.MapDataset):
    def __init__(self, parent, width):
        super().__init__(parent)
        self._width = width

    def __len__(self):
        return len(self._parent) - self._width + 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        with self._stats.record_self_time():
            return self._stats.record_output_spec(
                [self._parent[index + j] for j in range(self._width)]
            )


class _TakeEvery(grain.DatasetIterator):
    def __init__(self, parent, step):
        super().__init__(parent)
        self._step, self._count = step, 0
        self.options_seen = None

    @grain_attrs.record_next_duration_if_output
    def __next__(self):
        self._assert_not_closed()
        if self.options_seen is None:
            self.options_seen = self._ctx.dataset_options
        while True:
            value = next(self._parent)
            self._count += 1
            if (self._count - 1) % self._step == 0:
                return value

    def get_state(self):
        return {"count": self._count, "parent": self._parent.get_state()}

    def set_state(self, state):
        self._count = state["count"]
        self._parent.set_state(state["parent"])


class TakeEvery(grain.IterDataset):
    def __init__(self, parent, step):
        super().__init__(parent)
        self._step = step

    def __iter__(self):
        return _TakeEvery(self._parent.__iter__(), self._step)


class _Interleave2(grain.DatasetIterator):
    def __init__(self, parents):
        super().__init__(parents)
        self._turn = 0

    def __next__(self):
        value = next(self._parents[self._turn])
        self._turn = 1 - self._turn
        return value

    def get_state(self):
        return {"turn": self._turn, "parents": [p.get_state() for p in self._parents]}

    def set_state(self, state):
        self._turn = state["turn"]
        for p, s in zip(self._parents, state["parents"], strict=True):
            p.set_state(s)


class Interleave2(grain.IterDataset):
    def __init__(self, a, b):
        super().__init__([a, b])

    def __iter__(self):
        return _Interleave2([p.__iter__() for p in self._parents])


def test_parent_of_datasets_and_iterators():
    base = grain.MapDataset.range(6)
    w = Window(base, 2)
    assert w._parent is base and w._parents == (base,)
    assert [list(x) for x in w] == [[i, i + 1] for i in range(5)]
    it_ds = TakeEvery(base.to_iter_dataset(), 2)
    assert it_ds._parent is it_ds.parents[0]
    it = iter(it_ds)
    assert it._parent is it._parents[0]
    assert list(it) == [0, 2, 4]


def test_parent_needs_exactly_one_parent():
    one = grain.MapDataset.range(2).to_iter_dataset()
    two = Interleave2(one, one)
    with pytest.raises(AssertionError, match="exactly one parent, it has 2"):
        _ = two._parent
    with pytest.raises(AssertionError, match="it has 0"):
        _ = grain.MapDataset.range(3)._parent
    assert list(two) == [0, 0, 1, 1]


def test_an_assigned_parent_wins():
    class Own(grain.MapDataset):
        def __init__(self, parent):
            super().__init__(parent)
            self._parent = parent.map(lambda x: -x)

        def __len__(self):
            return len(self._parent)

        def __getitem__(self, i):
            return self._parent[i]

    assert list(Own(grain.MapDataset.range(3))) == [0, -1, -2]


def test_ctx_dataset_options_are_the_pipelines():
    opts = grain.DatasetOptions(filter_raise_threshold_ratio=0.25)
    plain = iter(TakeEvery(grain.MapDataset.range(4).to_iter_dataset(), 1))
    next(plain)
    assert plain.options_seen == grain.DatasetOptions()
    ds = grain.experimental.WithOptionsIterDataset(
        TakeEvery(grain.MapDataset.range(4).to_iter_dataset(), 1), opts
    )
    it = iter(ds)
    next(it)
    inner = it if isinstance(it, _TakeEvery) else it._parent
    assert inner.options_seen.filter_raise_threshold_ratio == 0.25
    assert inner._ctx.mp_context == grain_attrs.MultiprocessingContext(0, 1)


def test_ctx_setter_applies_options_upstream():
    it = iter(TakeEvery(grain.MapDataset.range(4).to_iter_dataset(), 1))
    it._ctx.dataset_options = grain.DatasetOptions(filter_warn_threshold_ratio=0.5)
    assert it.options.filter_warn_threshold_ratio == 0.5
    assert it._parent._ctx.dataset_options.filter_warn_threshold_ratio == 0.5
    with pytest.raises(TypeError, match="DatasetOptions"):
        it._ctx.dataset_options = {"filter_warn_threshold_ratio": 0.5}
    other = iter(grain.MapDataset.range(2).to_iter_dataset())
    other._ctx = it._ctx  # shares it's context, as in Grain
    assert other._ctx.dataset_options.filter_warn_threshold_ratio == 0.5


def test_stats_record_nothing_and_return_elements():
    stats = grain.MapDataset.range(2)._stats
    with stats.record_self_time(offset_ns=5, num_elements=2):
        pass
    assert stats.record_output_spec(3) == 3
    assert stats.record_bytes_consumed("x") == "x" and stats.record_bytes_produced(b"y") == b"y"
    assert stats.report() is None
    timer = grain_attrs.Timer()
    with timer:
        sum(range(1000))
    assert timer.value() > 0
    timer.reset()
    assert timer.value() == 0


def test_closed_flag_and_assert_not_closed():
    it = iter(TakeEvery(grain.MapDataset.range(4).to_iter_dataset(), 1))
    assert it._closed is False
    next(it)
    it.close()
    assert it._closed is True
    with pytest.raises(ValueError, match="closed iterator"):
        next(it)


def test_custom_stages_checkpoint_exactly():
    ds = Window(grain.MapDataset.range(9).shuffle(seed=3), 3).to_iter_dataset()
    testing.assert_equal_output_after_checkpoint(TakeEvery(ds, 2).map(tuple))
    testing.assert_equal_output_after_checkpoint(
        Interleave2(ds, TakeEvery(grain.MapDataset.range(20, 30).to_iter_dataset(), 3))
    )


def test_custom_stage_pickles_after_using_private_attributes():
    ds = Window(grain.MapDataset.range(5), 2)
    _ = ds._stats, ds._parent
    it = iter(TakeEvery(ds.to_iter_dataset(), 1))
    _ = it._ctx.dataset_options
    again = pickle.loads(pickle.dumps(ds))
    assert list(again) == list(ds)
    ctx = pickle.loads(pickle.dumps(it._ctx))
    assert ctx.mp_context == grain_attrs.MultiprocessingContext()


def test_custom_stage_in_worker_processes():
    ds = TakeEvery(Window(grain.MapDataset.range(12), 2).to_iter_dataset(), 2)
    it = iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        got = [list(x) for x in it]
    finally:
        it.close()
    # Each worker runs the whole pipeline over its share (windows i::2), as in Grain.
    assert got == [[0, 1], [1, 2], [4, 5], [5, 6], [8, 9], [9, 10]]


class Doubled(grain.MapDataset):
    """Grain's bulk hook: _getitems overridden, reading the parent with _getitems."""

    def __init__(self, parent):
        super().__init__(parent)
        self.bulk_reads = 0

    def __len__(self):
        return len(self._parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        x = self._parent[index]
        return None if x is None else 2 * x

    def _getitems(self, indices):
        self.bulk_reads += 1
        return [None if x is None else 2 * x for x in self._parent._getitems(indices)]


def test_an_overridden_getitems_gets_the_kernels_bulk_reads():
    ds = Doubled(grain.MapDataset.range(10).filter(lambda x: x != 3))
    assert ds._parent._getitems([2, 3, 4]) == [2, None, 4]
    assert list(ds.to_iter_dataset()) == [0, 2, 4, 8, 10, 12, 14, 16, 18]
    assert ds.bulk_reads > 0
    assert ds._getitems([1, 2]) == [2, 4]
    testing.assert_equal_output_after_checkpoint(ds.to_iter_dataset())


def test_super_getitems_of_an_override_reads_elements_one_by_one():
    class Plain(Doubled):
        def _getitems(self, indices):
            return super(Doubled, self)._getitems(indices)

    assert list(Plain(grain.MapDataset.range(4)).to_iter_dataset()) == [0, 2, 4, 6]
