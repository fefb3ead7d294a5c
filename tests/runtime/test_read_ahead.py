"""``ReadAhead``, the kernel's one thread read-ahead (thread prefetch and interleave use it).

Every wait here is a hang guard (``BOUND``, far above what any step needs), never a timing check.
"""

from __future__ import annotations

import threading
import time

import pytest

import grain_core as grain
from grain_core import author
from grain_core.runtime import read_ahead
from grain_core.runtime.read_ahead import ReadAhead

BOUND = 30.0
X, END, ERR = ReadAhead.ELEMENT, ReadAhead.END, ReadAhead.ERROR


def _wait_for(cond, bound: float = BOUND) -> bool:
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _source(n: int):
    return iter(grain.MapDataset.range(n).to_iter_dataset())


def _drain(ahead: ReadAhead) -> list:
    out = []
    while True:
        item = ahead.peek(1)[0]
        if item[1] is not X:
            return out + [item]
        out.append((ahead.take(item), ahead.state))


class _Gated:
    """An iterator whose ``next()`` for position ``block_at`` waits until ``release`` is set."""

    def __init__(self, n: int, block_at: int):
        self.pos, self.n, self.block_at = 0, n, block_at
        self.entered, self.release = threading.Event(), threading.Event()
        self.closed = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.pos == self.block_at:
            self.entered.set()
            assert self.release.wait(BOUND)
        if self.pos >= self.n:
            raise StopIteration
        self.pos += 1
        return self.pos - 1

    def get_state(self):
        return {"pos": self.pos}

    def set_state(self, state):
        self.pos = state["pos"]

    def close(self):
        self.closed += 1


def test_it_is_the_authors_building_block():
    assert author.ReadAhead is ReadAhead
    assert ReadAhead.JOIN_SECONDS == read_ahead.JOIN_SECONDS
    with pytest.raises(ValueError, match="read-ahead size"):
        ReadAhead(_source(3), 0)


def test_elements_come_in_order_with_the_state_after_each():
    ahead = ReadAhead(_source(6), 2)
    try:
        got = _drain(ahead)
    finally:
        ahead.close()
    *elements, last = got
    assert [x for x, _ in elements] == list(range(6))
    assert last[1] is END and ahead.mark[0] == 6
    for i, (_, state) in enumerate(elements):  # each state restores to the element after it
        it = _source(6)
        it.set_state(state)
        assert list(it) == list(range(i + 1, 6))


def test_nothing_is_taken_until_the_mark_moves_and_a_give_back_takes_it_again():
    ahead = ReadAhead(_source(10), 4)
    try:
        ahead.start()
        assert _wait_for(lambda: len(ahead.peek(4, wait=False)) == 4)
        first = ahead.peek(4)
        assert [item[2] for item in first] == [0, 1, 2, 3]
        assert ahead.peek(4) == first  # peeking takes nothing
        before = ahead.mark
        ahead.mark = (first[1][0], first[1][3])  # takes 0 and 1 in one assignment
        assert ahead.state == first[1][3]
        ahead.mark = before  # given back before the next peek: taken again
        assert ahead.peek(2) == first[:2]
        mark = ahead.mark
        assert ahead.take(first[0]) == 0
        ahead.give_back(mark)  # the one element taken since `mark`
        assert ahead.peek(1)[0] == first[0]
        assert ahead.take(first[0]) == 0
        assert ahead.peek(1)[0][2] == 1  # a peek drops what was taken: no give-back now
        ahead.give_back(mark)
        assert ahead.peek(1)[0][2] == 1
    finally:
        ahead.close()


def test_an_error_is_raised_at_its_position_every_time():
    class Failing(_Gated):
        def __next__(self):
            if self.pos == 2:
                raise KeyError("bad element")
            return super().__next__()

    ahead = ReadAhead(Failing(5, block_at=-1), 3)
    try:
        assert [ahead.take(ahead.peek(1)[0]) for _ in range(2)] == [0, 1]
        for _ in range(2):  # not consumed: asked again, it is the same error
            item = ahead.peek(3)
            assert len(item) == 1 and item[0][1] is ERR
            assert isinstance(item[0][2], KeyError)
    finally:
        ahead.close()


def test_close_never_waits_on_user_code_and_the_thread_closes_the_iterator():
    it = _Gated(5, block_at=1)
    ahead = ReadAhead(it, 2)
    try:
        ahead.start()
        assert it.entered.wait(BOUND)
        ahead.close()  # the thread is inside next(): close() returns after JOIN_SECONDS at most
        assert it.closed == 0  # ... and leaves the close to the thread
    finally:
        it.release.set()
    assert _wait_for(lambda: it.closed == 1)
    ahead.close()  # idempotent
    assert it.closed == 1
    with pytest.raises(RuntimeError, match="after close"):
        ahead.peek(1)


def test_a_restore_while_the_thread_is_in_user_code_is_applied_by_the_next_thread():
    it = _Gated(5, block_at=1)
    ahead = ReadAhead(it, 2)
    try:
        ahead.start()
        assert ahead.take(ahead.peek(1)[0]) == 0
        assert it.entered.wait(BOUND)
        moved = []
        assert not ahead.restore(lambda i: moved.append(i), {"pos": 3})
        assert moved == [] and ahead.state == {"pos": 3}  # reported meanwhile
        it.release.set()
        assert [ahead.take(ahead.peek(1)[0]) for _ in range(2)] == [3, 4]
        assert ahead.peek(1)[0][1] is END
        assert ahead.restore(lambda i: i.set_state({"pos": 1}), None)  # nobody inside: now
        assert ahead.take(ahead.peek(1)[0]) == 1
    finally:
        it.release.set()
        ahead.close()
    assert _wait_for(lambda: it.closed == 1)


def test_a_thread_that_died_is_an_error_not_a_wait():
    ahead = ReadAhead(_source(3), 1, owner="MyIterator")
    try:
        ahead.start()
        reading = ahead._reading
        reading.stop()  # ends the thread (as if killed outside the iterator) ...
        reading.stop_flag = False  # ... without the ReadAhead knowing
        with pytest.raises(RuntimeError, match="MyIterator: the read-ahead thread ended"):
            ahead.peek(1)
    finally:
        ahead.close()
