"""``to_iter_dataset``'s ``next()`` serves the current chunk before the thread guard
(``fast_next.list_serving_next``) only while that chunk is a plain list with no element to skip;
otherwise (filtered ``None`` elements, a chunk read element by element, a foreign sequence) it
takes the guarded path. Elements, order and states are the same either way."""

from __future__ import annotations

import threading

import pytest

import grain_core as grain
from grain_core.dataset.concurrency import ConcurrentIteratorUseError
from grain_core.dataset.lazy_chunk import LazyChunk
from grain_core.dataset.prefetch import PrefetchDatasetIterator

OPTIONS = [
    grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
    grain.ReadOptions(),
    grain.ReadOptions(num_threads=2, prefetch_buffer_size=7),
]


def _counted_full(monkeypatch):
    """Counts the calls of the iterator's full (guarded) ``next()``."""
    calls = []
    full = PrefetchDatasetIterator._next_full

    def counting(self):
        calls.append(1)
        return full(self)

    monkeypatch.setattr(PrefetchDatasetIterator, "_next_full", counting)
    # __next__ was built around the original function: rebuild it around the counting one.
    from grain_core.dataset.fast_next import list_serving_next

    monkeypatch.setattr(
        PrefetchDatasetIterator, "__next__", list_serving_next("_current", "_current_pos", counting, "_serve_stop")
    )
    return calls


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_a_dense_chunk_is_served_without_the_full_next(monkeypatch, options):
    calls = _counted_full(monkeypatch)
    it = iter(grain.MapDataset.range(1000).to_iter_dataset(options))
    assert list(it) == list(range(1000))
    # one full next() per chunk made current (and the one raising StopIteration), not per element
    assert 1 <= len(calls) < 200
    it.close()


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_chunks_with_skipped_elements_take_the_full_next_and_stay_exact(monkeypatch, options):
    calls = _counted_full(monkeypatch)
    ds = grain.MapDataset.range(600).filter(lambda x: x % 3 != 0).to_iter_dataset(options)
    it = iter(ds)
    head = [next(it) for _ in range(100)]
    state = it.get_state()
    rest = list(it)
    assert head + rest == [x for x in range(600) if x % 3 != 0]
    # Runs without None are served before the guard; each run starts with a full next().
    assert len(rest) // 3 <= len(calls) < len(head) + len(rest)
    it.set_state(state)
    assert list(it) == rest
    it.close()


def _mixed_calls(every: int) -> tuple[list[int], list[int]]:
    """Elements and states of next(), next_chunk() and unread() mixed over chunks with Nones."""
    ds = grain.MapDataset.range(3000).filter(lambda x: x % every != 0)
    it = PrefetchDatasetIterator(ds, grain.ReadOptions(num_threads=0, prefetch_buffer_size=0), False)
    out, states, k = [], [], 0
    while True:
        k += 1
        try:
            if k % 5 == 0:
                got = it.next_chunk(7)
                if k % 10 == 0 and len(got) > 2:
                    it.unread(2)
                    got = got[:-2]
                out += got
            else:
                out.append(next(it))
        except StopIteration:
            break
        states.append(it.get_state()["next_index"])
    return out, states


@pytest.mark.parametrize("every", [2, 3, 7, 1000])
def test_runs_between_nones_with_chunks_and_unread_in_between(monkeypatch, every):
    """next(), next_chunk() and unread() mixed over chunks with Nones give the elements and
    states the guarded next() alone gives (a run found by next() stays valid when next_chunk
    moves on; unread makes next() look again)."""
    out, states = _mixed_calls(every)
    assert out == [x for x in range(3000) if x % every != 0]
    with monkeypatch.context() as m:
        from grain_core.dataset.concurrency import guarded

        m.setattr(
            PrefetchDatasetIterator,
            "__next__",
            guarded(PrefetchDatasetIterator._next_full, "__next__"),
        )
        assert _mixed_calls(every) == (out, states)


def test_nones_kept_by_allow_nones_are_served_in_place():
    ds = grain.MapDataset.range(50).map(lambda x: None if x % 2 else x)
    it = PrefetchDatasetIterator(ds, grain.ReadOptions(num_threads=0, prefetch_buffer_size=0), True)
    assert list(it) == [None if x % 2 else x for x in range(50)]


def test_states_between_fast_elements_are_exact():
    ds = grain.MapDataset.range(300).to_iter_dataset()
    it = iter(ds)
    seen, states = [], []
    for _ in range(150):
        states.append(it.get_state())
        seen.append(next(it))
    for k in (0, 1, 37, 149):
        again = iter(ds)
        again.set_state(states[k])
        assert next(again) == seen[k]
        again.close()
    it.close()


def test_a_lazy_chunk_is_not_served_before_the_guard():
    it = iter(grain.MapDataset.range(10).to_iter_dataset(grain.ReadOptions()))
    assert next(it) == 0
    lazy = LazyChunk(it._ds, 1, 10)
    it._current, it._current_start, it._current_pos = lazy, 1, 0  # as the slow-element rule does
    it._serve_stop, it._current_dense, it._read_to = 0, True, 10
    assert not it._buffer
    assert list(it) == list(range(1, 10))
    it.close()


def test_another_thread_inside_is_refused_with_elements_ready():
    it = iter(grain.MapDataset.range(100).to_iter_dataset())
    assert next(it) == 0
    it._grain_owner = threading.get_ident() + 1  # as if another thread were inside
    with pytest.raises(ConcurrentIteratorUseError, match="is inside this iterator"):
        next(it)
    it._grain_owner = None
    assert list(it) == list(range(1, 100))
    it.close()


def test_list_serving_next_with_stop_serves_only_below_it():
    """``list_serving_next(..., stop)``: positions below ``self.<stop>`` come before the guard;
    from ``stop`` on (and with ``stop`` 0) every ``next()`` takes the full path."""
    from grain_core.author import DatasetIterator, list_serving_next

    class Bounded(DatasetIterator):
        def __init__(self, items, stop):
            super().__init__()
            self._items, self._pos, self._stop, self.full_calls = items, 0, stop, 0

        def _full(self):
            self.full_calls += 1
            if self._pos >= len(self._items):
                raise StopIteration
            self._pos += 1
            return self._items[self._pos - 1]

        __next__ = list_serving_next("_items", "_pos", _full, "_stop")

        def get_state(self):
            return {"pos": self._pos}

        def set_state(self, state):
            self._pos = state["pos"]

    it = Bounded(list(range(10)), 6)
    assert list(it) == list(range(10))
    assert it.full_calls == 4 + 1  # positions 6..9 and the StopIteration
    it = Bounded(list(range(5)), 0)
    assert list(it) == list(range(5))
    assert it.full_calls == 5 + 1
    with pytest.raises(ValueError, match="not an attribute name"):
        list_serving_next("_items", "_pos", lambda self: None, "not a name")
