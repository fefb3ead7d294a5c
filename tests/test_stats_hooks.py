"""grain_core.stats reads stages through declared hooks only (issue 29): ``buffer_fill()`` and
``worker_stats()`` of ``DatasetIterator``, never a stage's private attributes."""

from __future__ import annotations

import collections

import grain_core as grain
from grain_core import stats
from grain_core.author import OneParentIterator
from grain_core.dataset.stages import OneParentIterDataset


class _Counted(OneParentIterDataset):
    """Passes elements through; its iterator may declare a buffer fill."""

    def __init__(self, parent, fill=None):
        super().__init__(parent)
        self.fill = fill

    def __iter__(self):
        return _CountedIterator(self.parent.__iter__(), self.fill)

    def __str__(self):
        return "Counted"


class _CountedIterator(OneParentIterator):
    kind = "Counted"

    def __init__(self, parent, fill):
        super().__init__(parent)
        self.fill = fill
        # A private deque with a maxlen: the old statistics guessed a buffer from names like this.
        self._buffer = collections.deque([1, 2], maxlen=4)
        self.samples = 0

    def __next__(self):
        return next(self.parent)

    def buffer_fill(self):
        if self.fill is None:
            return super().buffer_fill()
        self.samples += 1
        return self.fill


def _stage(s, name):
    return next(st for st in s.stages if st.name == name)


def test_a_declared_buffer_fill_is_sampled_before_each_element():
    ds = _Counted(grain.MapDataset.source(list(range(10))).to_iter_dataset(), fill=0.25)
    it = stats.iter_with_stats(ds)
    assert list(it) == list(range(10))
    st = _stage(it.stats(), "Counted")
    assert st.buffer_fill == 0.25
    assert st.elements == 10


def test_private_attributes_are_not_read():
    ds = _Counted(grain.MapDataset.source(list(range(5))).to_iter_dataset())
    it = stats.iter_with_stats(ds)
    list(it)
    assert _stage(it.stats(), "Counted").buffer_fill is None  # its _buffer deque is not a hook


def test_default_hooks_say_nothing():
    it = iter(grain.MapDataset.source([1, 2]).to_iter_dataset().map(lambda x: x))
    assert it.buffer_fill() is None
    assert it.worker_stats() is None


def test_to_iter_dataset_declares_its_buffer():
    it = iter(grain.MapDataset.source(list(range(100))).to_iter_dataset(
        grain.ReadOptions(num_threads=2, prefetch_buffer_size=8)))
    next(it)
    fill = it.buffer_fill()
    assert fill is not None and 0.0 <= fill <= 1.0
    sync = iter(grain.MapDataset.source([1]).to_iter_dataset(grain.ReadOptions(num_threads=0)))
    assert sync.buffer_fill() is None
