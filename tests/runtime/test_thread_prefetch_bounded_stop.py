"""Thread prefetch never waits without a limit for its thread: ``set_state()`` and ``close()``
return even while the prefetch thread is stuck in user code (a map function blocking on an event),
and no element is lost or repeated once that code returns.

The map function blocks the first time it sees element 3, after telling the test it got there, so
the thread is known to be inside user code when the test calls ``set_state`` / ``close`` (from a
helper thread, so that a regression fails the test by its bound instead of hanging it). The bound
is a hang guard for a loaded machine (the iterator waits at most ``JOIN_SECONDS``, 1 s), not a
speed check; nothing else depends on timing.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import grain_core as grain
from grain_core import experimental
from grain_core.dataset.next_index import set_next_index

pytestmark = pytest.mark.timeout(300)

BOUND = 30.0  # seconds: far above JOIN_SECONDS; reaching it means the call waited without a limit
N = 10


class _BlockOnce:
    """Returns its input; the first call with ``at`` sets ``entered`` and waits for ``release``
    (at most 120 s, so a failing test still ends)."""

    def __init__(self, at: int):
        self.at = at
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, x: int) -> int:
        if x == self.at and not self.entered.is_set():
            self.entered.set()
            self.release.wait(120)
        return x


class _RecordsClose(grain.DatasetIterator):
    """A pass-through stage applying ``fn`` that records when it is closed."""

    def __init__(self, parent: grain.DatasetIterator, fn: Any):
        super().__init__(parent)
        self.fn = fn
        self.closed = threading.Event()

    def __next__(self) -> int:
        return self.fn(next(self._parents[0]))

    def get_state(self) -> dict[str, Any]:
        return self._parents[0].get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._parents[0].set_state(state)

    def close(self) -> None:
        self.closed.set()
        super().close()


def _source() -> grain.IterDataset:
    return grain.MapDataset.range(N).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    )


def _stuck_iterator(blocker: _BlockOnce, buffer: int = 4):
    """A thread-prefetch iterator that returned 0 and whose thread is inside ``blocker(3)``."""
    parent = _RecordsClose(iter(_source()), blocker)
    it = experimental.ThreadPrefetchDatasetIterator(parent, buffer)
    assert next(it) == 0
    assert blocker.entered.wait(BOUND), "the prefetch thread never reached element 3"
    return it, parent


def _returns_within_bound(blocker: _BlockOnce, call: Any) -> Any:
    """Runs ``call()`` in a helper thread; fails (after unblocking the map function, so nothing
    stays stuck) if it has not returned within BOUND. Returns its result or re-raises its error."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as e:  # re-raised in the test's thread
            out["error"] = e

    t = threading.Thread(target=run, name="test-caller", daemon=True)
    t.start()
    t.join(BOUND)
    if t.is_alive():
        blocker.release.set()
        t.join(120)
        pytest.fail(f"the call waited for the stuck prefetch thread for more than {BOUND} s")
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "grain_core-thread-prefetch"]


def _wait_threads_gone(before: list[threading.Thread]) -> list[threading.Thread]:
    for t in _prefetch_threads():
        if t not in before:
            t.join(BOUND)
    return [t for t in _prefetch_threads() if t not in before and t.is_alive()]


def test_set_state_returns_while_the_thread_is_in_user_code_and_nothing_is_lost():
    before = _prefetch_threads()
    blocker = _BlockOnce(at=3)
    it, parent = _stuck_iterator(blocker)
    try:
        state = it.get_state()  # after 0; 1 and 2 were read ahead, 3 is being computed
        _returns_within_bound(blocker, lambda: it.set_state(state))
        assert it.get_state() == state
        blocker.release.set()
        # The thread that was stuck drops the 3 it returns; the fresh reader starts after 0.
        assert list(it) == list(range(1, N))
    finally:
        it.close()
    assert parent.closed.is_set()
    assert _wait_threads_gone(before) == []


def test_close_returns_and_the_stuck_thread_closes_the_parent_when_it_leaves():
    before = _prefetch_threads()
    blocker = _BlockOnce(at=3)
    it, parent = _stuck_iterator(blocker)
    _returns_within_bound(blocker, it.close)
    # The parent is still in use by the thread: it is not closed under its feet...
    assert not parent.closed.is_set()
    blocker.release.set()
    # ...but by that thread, once the map function returns.
    assert parent.closed.wait(BOUND)
    assert _wait_threads_gone(before) == []
    with pytest.raises(RuntimeError, match="closed"):
        next(it)


def test_restores_while_stuck_then_close_before_the_thread_returns():
    before = _prefetch_threads()
    blocker = _BlockOnce(at=3)
    parent = _RecordsClose(iter(_source()), blocker)
    it = experimental.ThreadPrefetchDatasetIterator(parent, 4)
    start = it.get_state()
    assert next(it) == 0
    assert blocker.entered.wait(BOUND)
    after_0 = it.get_state()
    _returns_within_bound(blocker, lambda: it.set_state(start))
    _returns_within_bound(blocker, lambda: it.set_state(after_0))  # the later one wins
    assert it.get_state() == after_0
    # A reader started while the old thread is stuck waits for it (next() would wait for 3's
    # computation anyway); close() must not wait for either.
    it.start_prefetch()
    _returns_within_bound(blocker, it.close)
    blocker.release.set()
    assert parent.closed.wait(BOUND)
    assert _wait_threads_gone(before) == []


def test_restore_while_stuck_then_read_from_the_later_restore():
    blocker = _BlockOnce(at=3)
    it, parent = _stuck_iterator(blocker)
    try:
        fresh = experimental.ThreadPrefetchDatasetIterator(iter(_source()), 4)
        try:
            start = fresh.get_state()
        finally:
            fresh.close()
        _returns_within_bound(blocker, lambda: it.set_state(start))
        blocker.release.set()
        assert list(it) == list(range(N))  # 0 again: the state is from before it
    finally:
        it.close()


def test_next_index_while_stuck_is_a_clear_error_and_the_position_is_kept():
    blocker = _BlockOnce(at=3)
    it, _ = _stuck_iterator(blocker)
    try:
        with pytest.raises(RuntimeError, match="still inside the parent's code after"):
            _returns_within_bound(blocker, lambda: set_next_index(it, 7))
        blocker.release.set()
        assert list(it) == list(range(1, N))
    finally:
        it.close()

