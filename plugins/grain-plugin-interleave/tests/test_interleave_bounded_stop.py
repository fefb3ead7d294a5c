"""Stopping interleave's threads is bounded: ``close()`` and a ``set_state`` that replaces the open
iterators (what a give-back after a ``KeyboardInterrupt`` does: ``next()`` -> batch's give-back ->
``set_state`` -> ``restore_state`` -> closing the replaced slots) return while a reader or opening
thread is still inside a dataset's code, and that thread closes what it holds when the code returns.

Before, ``stop()`` joined without a bound, so these calls waited as long as the dataset's code did
(forever for a dataset blocked on something the caller would do next). The datasets here block
on a ``threading.Event`` the test sets; every wait has a timeout, so on the old code the tests fail
after ``BOUND`` seconds instead of hanging. Nothing depends on timing: the test waits until the
thread is inside the dataset's code (an Event) before it stops it.
"""

from __future__ import annotations

import threading
import time

import pytest

import grain_core as grain

pytestmark = pytest.mark.timeout(300)

BOUND = 30.0  # far above JOIN_SECONDS: a hang guard on a loaded machine, not a speed check


class _Gate:
    """Blocks a dataset's code until released; tells the test when a thread is blocked in it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def block(self) -> None:
        self.entered.set()
        self.release.wait(120)  # bounded: the test always releases it


class _Blocking(grain.IterDataset):
    """``values``, blocking in ``next()`` before the element at ``block_at`` (first iterator only)
    or in ``__iter__`` (``block_open``); records whether its iterators were closed."""

    def __init__(self, values, gate, block_at=None, block_open=False):
        super().__init__()
        self.values, self.gate, self.block_at, self.block_open = values, gate, block_at, block_open
        self.iterators: list[_BlockingIterator] = []

    def __iter__(self):
        if self.block_open and not self.iterators:
            self.gate.block()
        it = _BlockingIterator(self, first=not self.iterators)
        self.iterators.append(it)
        return it


class _BlockingIterator(grain.DatasetIterator):
    def __init__(self, ds, first):
        super().__init__()
        self._ds, self._first, self._pos, self.closed = ds, first, 0, False

    def __next__(self):
        if self._pos >= len(self._ds.values):
            raise StopIteration
        if self._first and self._pos == self._ds.block_at:
            self._ds.gate.block()
        x = self._ds.values[self._pos]
        self._pos += 1
        return x

    def get_state(self):
        return {"pos": self._pos}

    def set_state(self, state):
        self._pos = state["pos"]

    def close(self):
        self.closed = True


def _in_thread(fn) -> threading.Event:
    """Runs ``fn`` in a daemon thread; the Event is set when it returned."""
    done = threading.Event()

    def run():
        fn()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def _wait_for(predicate, timeout=BOUND) -> bool:  # a hang guard, not a speed check
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def _reader_threads():
    return [t for t in threading.enumerate() if t.name.startswith("interleave")]


def _blocked_reader_setup():
    gate = _Gate()
    a = _Blocking([0, 1, 2, 3], gate, block_at=1)
    b = _Blocking([10, 11, 12], gate)
    ds = grain.experimental.InterleaveIterDataset([a, b], cycle_length=2, iter_buffer_size=1)
    it = iter(ds)
    start = it.get_state()
    assert [next(it), next(it)] == [0, 10]  # A's reader may now read A's element 1: it blocks
    assert gate.entered.wait(BOUND), "the reader thread never reached the dataset's code"
    return gate, a, it, start


def test_set_state_returns_while_a_replaced_reader_is_in_the_datasets_code():
    gate, a, it, start = _blocked_reader_setup()
    try:
        done = _in_thread(lambda: it.set_state(start))  # replaces A's slot: stops its reader
        assert done.wait(BOUND), "set_state waited for a reader thread blocked in user code"
    finally:
        gate.release.set()
    assert list(it) == [0, 10, 1, 11, 2, 12, 3]
    it.close()
    assert _wait_for(lambda: a.iterators[0].closed), "the blocked reader never closed its iterator"
    assert all(i.closed for i in a.iterators)
    assert _wait_for(lambda: not _reader_threads()), _reader_threads()


def test_close_returns_while_a_reader_is_in_the_datasets_code():
    gate, a, it, _ = _blocked_reader_setup()
    try:
        done = _in_thread(it.close)
        assert done.wait(BOUND), "close() waited for a reader thread blocked in user code"
        assert not a.iterators[0].closed  # not closed under the reader's feet
    finally:
        gate.release.set()
    assert _wait_for(lambda: a.iterators[0].closed), "the blocked reader never closed its iterator"
    assert _wait_for(lambda: not _reader_threads()), _reader_threads()


def test_close_returns_while_an_opening_thread_is_in_the_datasets_code():
    gate = _Gate()
    datasets = [_Blocking([0, 1], gate), _Blocking([10, 11], gate, block_open=True)]
    ds = grain.experimental.InterleaveIterDataset(
        datasets, cycle_length=1, num_make_iter_threads=1, make_iter_buffer_size=1
    )
    it = iter(ds)
    try:
        assert next(it) == 0  # opening dataset 1 ahead blocks in its __iter__
        assert gate.entered.wait(BOUND), "the opening thread never reached the dataset's code"
        done = _in_thread(it.close)
        assert done.wait(BOUND), "close() waited for an opening thread blocked in user code"
    finally:
        gate.release.set()
    # The iterator it opened after close() is closed by the opening thread itself.
    assert _wait_for(lambda: len(datasets[1].iterators) == 1 and datasets[1].iterators[0].closed)
    assert _wait_for(lambda: not _reader_threads()), _reader_threads()


def test_a_reader_thread_that_died_is_an_error_not_a_wait():
    gate = _Gate()
    ds = grain.experimental.InterleaveIterDataset(
        [_Blocking([0, 1, 2], gate)], cycle_length=1, iter_buffer_size=1
    )
    it = iter(ds)
    assert next(it) == 0
    reading = it._slots[0].reader._reading
    reading.stop()  # the thread ends (as a thread killed outside the dataset would) ...
    reading.stop_flag = False  # ... without the ReadAhead knowing it stopped it
    with pytest.raises(RuntimeError, match="InterleaveIterDataset: the read-ahead thread ended"):
        while True:  # the buffered element may still come first; then an error, never a wait
            next(it)
    it.close()
