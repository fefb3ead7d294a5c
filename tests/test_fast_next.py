"""``list_serving_next``: a ``__next__`` serving a list of ready elements before the thread guard,
and through the guard (with its checks and the statistics hook) whenever that cannot."""

from __future__ import annotations

import threading

import pytest

from grain_core.author import DatasetIterator, list_serving_next
from grain_core.dataset.concurrency import ConcurrentIteratorUseError, set_stats_recorder


class _Lists(DatasetIterator):
    """Serves lists of ``size`` ints, counting how often its full ``next()`` ran."""

    def __init__(self, total: int, size: int):
        super().__init__()
        self._total, self._size = total, size
        self._buf: list[int] = []
        self._pos = 0
        self._next_start = 0
        self.full_calls = 0

    def _next_full(self):
        self.full_calls += 1
        pos = self._pos
        if pos < len(self._buf):
            self._pos = pos + 1
            return self._buf[pos]
        if self._next_start >= self._total:
            raise StopIteration
        stop = min(self._total, self._next_start + self._size)
        self._buf, self._pos = list(range(self._next_start, stop)), 1
        self._next_start = stop
        return self._buf[0]

    __next__ = list_serving_next("_buf", "_pos", _next_full)

    def get_state(self):
        return {"start": self._next_start - len(self._buf) + self._pos}

    def set_state(self, state):
        self._buf, self._pos, self._next_start = [], 0, state["start"]


def test_elements_of_the_list_skip_the_full_next():
    it = _Lists(25, 10)
    assert list(it) == list(range(25))
    assert it.full_calls == 3 + 1  # one per list read, and the one that raised StopIteration


def test_another_thread_inside_is_refused_even_with_elements_ready():
    it = _Lists(25, 10)
    assert [next(it), next(it)] == [0, 1]
    it._grain_owner = threading.get_ident() + 1  # as if another thread were inside
    with pytest.raises(ConcurrentIteratorUseError, match="is inside this iterator"):
        next(it)
    it._grain_owner = None
    assert list(it) == list(range(2, 25))


class _Recorder:
    def __init__(self):
        self.nexts = 0

    def timed_next(self, fn, it):
        self.nexts += 1
        return fn(it)

    def timed_chunk(self, fn, it, max_elements):
        return fn(it, max_elements)


def test_a_measured_iterator_counts_every_element():
    it = _Lists(25, 10)
    recorder = _Recorder()
    set_stats_recorder(it, recorder)
    assert list(it) == list(range(25))
    assert recorder.nexts == 26  # every element and the end, none served past the recorder
    assert it.full_calls == 26


def test_the_function_is_marked_guarded_and_bad_names_are_refused():
    assert _Lists.__dict__["__next__"]._grain_guarded
    assert _Lists.__next__.__qualname__.endswith("_Lists.__next__")
    assert _Lists.__next__.__module__ == __name__
    with pytest.raises(ValueError, match="not an attribute name"):
        list_serving_next("_buf[0]", "_pos", _Lists._next_full)

