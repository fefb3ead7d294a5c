"""Per-stage times come through the declared ``DatasetIterator.stats_recorder`` hook and the map
stages' element hooks, never by changing a stage's class (issue 29 item 4)."""

from __future__ import annotations

import threading

import pytest

import grain_core as grain
from grain_core import stats
from grain_core.author import OneParentIterator, SourceIterator, StateField
from grain_core.dataset.concurrency import ConcurrentIteratorUseError
from grain_core.dataset.stages import OneParentIterDataset, OneParentMapDataset


class _Twice(OneParentIterDataset):
    """A plugin-style stage with no statistics code: each parent element twice."""

    def __iter__(self):
        return _TwiceIterator(self.parent.__iter__())

    def __str__(self):
        return "Twice"


class _TwiceIterator(OneParentIterator):
    kind = "Twice"

    def __init__(self, parent):
        super().__init__(parent)
        self.pending = None

    def __next__(self):
        if self.pending is not None:
            x, self.pending = self.pending, None
            return x
        x = next(self.parent)
        self.pending = x
        return x


class _Plus(OneParentMapDataset):
    """A plugin-style map stage with no statistics code."""

    def element_at(self, index):
        return self.parent.element_at(index) + 100

    def __str__(self):
        return "Plus"


def _stage(s, name):
    return next(st for st in s.stages if st.name == name)


def _iterators(it):
    yield it
    for p in getattr(it, "parents", ()):
        yield from _iterators(p)


def test_a_plugin_stage_is_timed_without_code_of_its_own():
    ds = _Twice(_Plus(grain.MapDataset.range(5)).to_iter_dataset())
    it = stats.iter_with_stats(ds)
    assert list(it) == [x for i in range(5) for x in (i + 100, i + 100)]
    s = it.stats()
    twice = _stage(s, "Twice")
    assert twice.elements == 10
    assert twice.calls == 11  # ten elements and the StopIteration
    assert twice.total_s > 0
    plus = _stage(s, "Plus")
    assert plus.kind == "map"
    assert plus.elements == 5


def test_no_stage_class_is_changed_and_each_iterator_holds_a_recorder():
    ds = _Twice(grain.MapDataset.range(4).map(lambda x: x).to_iter_dataset()).batch(2)
    plain_classes = [type(i) for i in _iterators(iter(ds))]
    it = stats.iter_with_stats(ds)
    measured = list(_iterators(it))
    assert [type(i) for i in measured] == plain_classes
    assert all(i.stats_recorder is not None for i in measured)
    assert [x.tolist() for x in it] == [[0, 0], [1, 1], [2, 2], [3, 3]]


def test_plain_iterators_have_no_recorder_and_the_dataset_is_unchanged():
    inner = _Plus(grain.MapDataset.range(3))
    ds = _Twice(inner.to_iter_dataset())
    stats.iter_with_stats(ds)
    assert "element_at" not in vars(inner)
    plain = iter(ds)
    assert all(i.stats_recorder is None for i in _iterators(plain))
    # Unmeasured iterators keep the guard's plain path: nobody inside, no recorder waiting.
    assert all(i._grain_owner is None for i in _iterators(plain))
    assert list(plain) == [100, 100, 101, 101, 102, 102]


class _Gate(OneParentIterDataset):
    """Passes elements through; the first ``next`` waits (bounded) until released."""

    def __init__(self, parent, inside, release):
        super().__init__(parent)
        self.inside, self.release = inside, release

    def __iter__(self):
        return _GateIterator(self.parent.__iter__(), self.inside, self.release)

    def __str__(self):
        return "Gate"


class _GateIterator(OneParentIterator):
    kind = "Gate"

    def __init__(self, parent, inside, release):
        super().__init__(parent)
        self.inside, self.release = inside, release

    def __next__(self):
        self.inside.set()
        assert self.release.wait(30)
        return next(self.parent)


def test_a_measured_iterator_still_refuses_a_second_thread():
    inside, release = threading.Event(), threading.Event()
    it = stats.iter_with_stats(_Gate(grain.MapDataset.range(3).to_iter_dataset(), inside, release))
    got = []
    t = threading.Thread(target=lambda: got.append(next(it)))
    t.start()
    try:
        assert inside.wait(30)
        with pytest.raises(ConcurrentIteratorUseError, match="while thread"):
            next(it)
        with pytest.raises(ConcurrentIteratorUseError):
            it.get_state()
    finally:
        release.set()
        t.join(30)
    assert not t.is_alive() and got == [0]
    # The recorder is back after the call: the next calls are measured and states still work.
    state = it.get_state()
    assert next(it) == 1
    it.set_state(state)
    assert list(it) == [1, 2]
    assert _stage(it.stats(), "Gate").elements == 4


def test_nested_calls_of_one_iterator_are_counted_once():
    # The default next_chunk calls the stage's own __next__: the chunk is counted, not each call.
    ds = _Twice(grain.MapDataset.range(3).to_iter_dataset())
    it = stats.iter_with_stats(ds)
    chunk = it.next_chunk(4)
    assert chunk == [0, 0, 1, 1][: len(chunk)]
    twice = _stage(it.stats(), "Twice")
    assert twice.elements == len(chunk)
    assert twice.calls == 1


class _ReadsTable(grain.IterDataset):
    """A plugin-style stage reading a ``MapDataset`` parent itself, under a name of its own."""

    def __init__(self, table):
        super().__init__(table)

    def __iter__(self):
        return _ReadsTableIterator(self.parents[0])

    def __str__(self):
        return "ReadsTable"


class _ReadsTableIterator(SourceIterator):
    kind = "ReadsTable"

    def __init__(self, table):
        super().__init__()
        self.my_table = table
        self.i = 0

    def __next__(self):
        if self.i >= len(self.my_table):
            raise StopIteration
        self.i += 1
        return self.my_table.element_at(self.i - 1)

    def get_state(self):
        return {"kind": self.kind, "i": self.i}

    def state_fields(self):
        return {"i": StateField.position()}

    def restore_state(self, state):
        self.i = state["i"]


def test_a_map_stage_read_by_a_plugin_iterator_is_found_by_identity():
    it = stats.iter_with_stats(_ReadsTable(_Plus(grain.MapDataset.range(3))))
    assert list(it) == [100, 101, 102]
    s = it.stats()
    assert [st.name for st in s.stages][:2] == ["ReadsTable", "Plus"]
    assert _stage(s, "Plus").elements == 3
    assert _stage(s, "Plus").depth == 1
