"""``ThreadPrefetchIterDataset``: a parent iterator read ahead by one background thread.

Contract:

* One daemon thread reads the parent into a buffer of at most ``prefetch_buffer_size`` elements
  (``0`` returns the parent's iterator unchanged). ``start_prefetch()`` starts the thread before the
  first ``next()``; otherwise the first ``next()`` does.
* Each buffered element carries the parent's state after it; ``get_state()`` is the state after the
  last element returned, so prefetched-but-unconsumed elements are never lost by a checkpoint.
* ``set_state`` stops the thread, restores the parent and restarts lazily with a fresh thread.
* An exception in the parent is re-raised at the position where it happened. ``close()`` (also ``with``
  and garbage collection) stops the thread and closes the parent.
* Every wait is bounded: ``set_state`` / ``close`` wait at most :data:`JOIN_SECONDS` for the thread.
  A thread still inside the parent's code then (a map function that blocks) is left to finish on
  its own: it can publish nothing after (the iterator reads on with a fresh producer), the parent
  is used by one thread at a time (the restore is applied by the next producer once the old thread
  has left the parent; ``get_state()`` reports the restored state meanwhile), and the parent of a
  closed iterator is closed by that thread when it leaves. Grain's ``get/set_next_index`` need the
  parent itself: they raise a clear ``RuntimeError`` in that case and keep the position.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable
from typing import Any

from grain_core import state as _state
from grain_core.dataset.base import DatasetIterator, IterDataset
from grain_core.dataset.next_index import get_next_index, set_next_index
from grain_core.validation import check_instance

__all__ = ["ThreadPrefetchIterDataset", "ThreadPrefetchDatasetIterator"]

_STATE_KIND = "ThreadPrefetchDatasetIterator"


class ThreadPrefetchIterDataset(IterDataset):
    """Reads ``parent`` ahead in a background thread, up to ``prefetch_buffer_size`` elements."""

    def __init__(self, parent: IterDataset, prefetch_buffer_size: int):
        check_instance(
            parent,
            IterDataset,
            "ThreadPrefetchIterDataset",
            verb="needs",
            expected="an IterDataset parent",
        )
        if isinstance(prefetch_buffer_size, bool) or int(prefetch_buffer_size) < 0:
            raise ValueError(
                "`prefetch_buffer_size` must be greater than or equal to 0, got "
                f"{prefetch_buffer_size!r}."
            )
        super().__init__(parent)
        self.prefetch_buffer_size = int(prefetch_buffer_size)

    def __iter__(self) -> DatasetIterator:
        parent_it = iter(self._parents[0])
        if self.prefetch_buffer_size == 0:
            return parent_it
        return ThreadPrefetchDatasetIterator(parent_it, self.prefetch_buffer_size)


_END = object()
_NONE = object()  # no restore waiting

#: The longest ``set_state()`` / ``close()`` wait for the prefetch thread to end. A thread still
#: inside the parent's code then (a map function that blocks) is left to finish on its own: it
#: publishes nothing more, and closes the parent itself if the iterator was closed meanwhile.
JOIN_SECONDS = 1.0


def _wake(token: threading.Lock) -> None:
    """Releases a wake-up token (a lock held while nobody has news); a no-op if already released."""
    try:
        token.release()
    except RuntimeError:
        pass


def _token() -> threading.Lock:
    t = threading.Lock()
    t.acquire()
    return t


class _Parent:
    """The parent iterator, used by one thread at a time, and what must happen to it next.

    A producer thread *enters* the parent (``user``) before calling it and leaves it when it ends;
    at most one is inside. A thread stopped while inside a long call of the parent's code stays
    inside until that call returns; meanwhile the consumer does not touch the parent: a restore
    waits in ``pending`` (applied by the next producer when it enters) and a close in
    ``close_requested`` (done by the thread leaving). ``lock`` is held for a few assignments only
    (and for the consumer's own short calls of the parent while nobody is inside), never while a
    producer is in the parent's code."""

    def __init__(self, it: Any, size: int):
        self.it = it
        self.size = size
        # Re-entrant: garbage collection may run this iterator's finalizer (shutdown) in a producer
        # thread while that thread holds the lock.
        self.lock = threading.RLock()
        self.user: _Producer | None = None
        self.pending: Any = _NONE  # a parent state to restore before the next read
        self.close_requested = False
        self.closed = False
        self.left = _token()  # released when a thread leaves the parent
        self.producer = _Producer(self, size)  # the current one (earlier ones are stopped)

    def leave(self) -> None:
        with self.lock:
            self.user = None
            close = self.close_requested and not self.closed
            if close:
                self.closed = True
        _wake(self.left)
        if close:  # the consumer closed the iterator while this thread was inside
            self._close_parent()

    def _close_parent(self) -> None:
        close = getattr(self.it, "close", None)
        if close is not None:
            close()

    def shutdown(self) -> None:
        """Stops the producer (waiting at most JOIN_SECONDS) and closes the parent, now or, if a
        stopped thread is still inside it, when that thread leaves. Idempotent."""
        self.producer.stop()
        with self.lock:
            if self.closed or self.close_requested:
                return
            if self.user is None:
                self.closed = True
                close_now = True
            else:
                self.close_requested = True
                close_now = False
        if close_now:
            self._close_parent()


class _Producer:
    """The thread's side; holds no reference to the consumer iterator so that it can be collected.

    The buffer holds ``(seq, kind, value, state)``. The consumer takes no lock: it reads
    ``buffer[0]``, commits by storing ``last = (seq, state)`` and removes the item at its next call,
    so an exception raised into ``next()`` (Ctrl-C) never loses or repeats an element. The two
    sides wake each other with tokens (locks released to signal, acquired with a timeout to wait).
    A producer runs once: after :meth:`stop`, the iterator makes a fresh one, so a stopped thread
    still in the parent's code has nowhere to publish what it returns."""

    def __init__(self, parent: Any, size: int, seq: int = 0):
        self.shared = parent if isinstance(parent, _Parent) else _Parent(parent, size)
        self.parent = self.shared.it
        self.size = size
        self.buffer: collections.deque[tuple[int, str, Any, Any]] = collections.deque()
        self.has_data = _token()
        self.has_room = _token()
        self.seq = seq
        # (seq of the last item returned, the parent's state after it): the consumer's commit.
        # The head of the buffer may be that item still (removed at the next call): it is free room.
        self.last: tuple[int, Any] = (seq, None)
        self.stop_flag = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is None and not self.stop_flag:
            self.thread = threading.Thread(
                target=self.run, name="grain_core-thread-prefetch", daemon=True
            )
            self.thread.start()

    def run(self) -> None:
        shared, entered = self.shared, False
        try:
            while True:  # a stopped thread may still be inside the parent: wait until it leaves
                with shared.lock:
                    if self.stop_flag or shared.closed or shared.close_requested:
                        return
                    if shared.user is None:
                        shared.user, entered = self, True
                        pending, shared.pending = shared.pending, _NONE
                        break
                shared.left.acquire(timeout=0.05)
            if pending is not _NONE:
                self.parent.set_state(pending)
            self._produce()
        except BaseException as e:  # a bug here must reach the consumer, not end the thread silently
            if not self.stop_flag:
                self.seq += 1
                self.buffer.append((self.seq, "err", e, None))
                _wake(self.has_data)
        finally:
            if entered:
                shared.leave()

    def _produce(self) -> None:
        parent, buf = self.parent, self.buffer
        while True:
            while self.occupied() >= self.size and not self.stop_flag:
                self.has_room.acquire(timeout=0.1)
            if self.stop_flag:
                return
            try:
                x = next(parent)
                kind, value, st = "x", x, parent.get_state()
            except StopIteration:
                kind, value, st = "end", _END, parent.get_state()
            except BaseException as e:  # re-raised by the consumer at this position
                kind, value, st = "err", e, None
            if self.stop_flag:  # stopped while in the parent's code: the element is dropped
                return
            self.seq += 1
            buf.append((self.seq, kind, value, st))
            _wake(self.has_data)
            if kind != "x":
                return

    def occupied(self) -> int:
        """Buffered items not returned yet. Called by the producer while the consumer may remove
        the head at any moment: ``last`` is read first, and the consumer only removes items, so
        the count is never less than the true one when it returns and the buffer bound holds
        (``last`` moves back only when an interrupted ``next()`` is rolled back)."""
        buf = self.buffer
        returned = self.last[0]
        n = len(buf)
        try:
            if n and buf[0][0] <= returned:
                n -= 1
        except IndexError:  # the consumer removed the head between len() and [0]
            n = len(buf)
        return n

    def head(self) -> tuple[int, str, Any, Any]:
        """The oldest buffered item, waiting for one; never removes it."""
        while True:
            buf = self.buffer
            if buf:
                return buf[0]
            t = self.thread
            if t is None or not t.is_alive():
                if buf:
                    continue
                raise RuntimeError("thread prefetch stopped unexpectedly")
            self.has_data.acquire(timeout=0.1)

    def remove(self, seq: int) -> None:
        """Removes the item ``seq`` if it is still the oldest (idempotent)."""
        buf = self.buffer
        if buf and buf[0][0] == seq:
            buf.popleft()
            _wake(self.has_room)

    def stop(self) -> None:
        """Stops the thread, waiting for it at most :data:`JOIN_SECONDS` (see :class:`_Parent`
        for a thread still in the parent's code then). A stopped producer never starts again."""
        self.stop_flag = True
        _wake(self.has_room)
        t = self.thread
        if t is not None and t is not threading.current_thread():
            try:
                t.join(JOIN_SECONDS)
            except RuntimeError:  # its start() was interrupted: it never ran
                pass
        self.buffer.clear()


class ThreadPrefetchDatasetIterator(DatasetIterator):
    """See the module docstring."""

    one_to_one = True

    def __init__(self, parent: DatasetIterator, prefetch_buffer_size: int):
        # A parent that is not a DatasetIterator (any iterator with get_state / set_state, as
        # Grain accepts) is the one parent, not a sequence of them.
        super().__init__(parent if isinstance(parent, DatasetIterator) else (parent,))
        self._shared = _Parent(parent, prefetch_buffer_size)
        self._closed = False
        self._finalizer = weakref.finalize(self, self._shared.shutdown)

    @property
    def _producer(self) -> _Producer:
        return self._shared.producer

    def _start(self) -> None:
        p = self._producer
        if p.stop_flag:  # a set_state interrupted while stopping it: read on from this position
            st = p.last[1]
            if st is None:  # its thread never started
                self._shared.producer = p = _Producer(self._shared, self._shared.size, p.seq)
            else:
                self._restore(lambda it: it.set_state(st), st)
                p = self._producer
        if p.last[1] is None:
            # The parent's state when the thread starts (the runtime may still call set_slice
            # upstream before, which changes it, e.g. in an mp_prefetch worker). No thread is in
            # the parent while ``last`` has no state (see ``_restore``).
            p.last = (p.last[0], self._parents[0].get_state())
        p.start()

    def _restore(self, apply: Callable[[Any], None], state_if_busy: Any) -> bool:
        """Stops the producer (bounded) and moves the parent with ``apply(parent)`` now, returning
        True; or, when a stopped thread is still inside the parent's code, leaves the parent to
        be restored to ``state_if_busy`` by the next producer when it enters, returning False.
        Either way the next ``next()`` reads with a fresh producer."""
        shared = self._shared
        old = shared.producer
        old.stop()
        new = _Producer(shared, shared.size, old.seq)
        shared.producer = new
        with shared.lock:
            if shared.user is None:  # nobody inside: move the parent now (its own error is raised)
                shared.pending = _NONE
                apply(shared.it)
                return True
            shared.pending = state_if_busy
        new.last = (new.seq, state_if_busy)
        return False

    def _busy_error(self, what: str) -> RuntimeError:
        return RuntimeError(
            f"ThreadPrefetchDatasetIterator: {what} the parent iterator, but the prefetch thread "
            f"is still inside the parent's code after {JOIN_SECONDS} s (a map function that "
            "blocks or takes long?). The iterator stays at its position; call it again once that "
            "call has returned."
        )

    def start_prefetch(self) -> None:
        if not self._closed:
            self._start()

    def _peek(self) -> tuple[int, str, Any, Any]:
        """The next item ``(seq, kind, value, state)`` without taking it (see ``_take``)."""
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        p = self._producer
        self._start()
        while True:
            item = p.head()
            if item[0] <= p.last[0]:  # returned already: removed now
                p.remove(item[0])
                continue
            return item

    @staticmethod
    def _state_after(item: tuple[int, str, Any, Any]) -> dict[str, Any]:
        """This iterator's state once ``item`` (from ``_peek``) has been returned."""
        return _state.make_state(_STATE_KIND, parent=item[3])

    def _take(self, item: tuple[int, str, Any, Any]) -> None:
        """Commits ``item`` (from ``_peek``, kind ``"x"``) as returned."""
        p = self._producer
        p.last = (item[0], item[3])
        _wake(p.has_room)

    def rollback_mark(self) -> Any:
        """A mark for :meth:`rollback` (see :func:`grain_core.runtime.api.next_or_rollback`)."""
        return self._producer.last

    def rollback(self, mark: Any) -> None:
        """Un-returns the element returned since ``mark``, if exactly one was (its caller was
        interrupted before it got it)."""
        p = self._producer
        if p.last is not mark and p.buffer and p.buffer[0][0] == p.last[0]:
            p.last = mark

    def __next__(self) -> Any:
        item = self._peek()
        seq, kind, value, st = item
        if kind == "x":
            p = self._producer
            prev = p.last
            p.last = (seq, st)  # the commit; the item is removed at the next call
            try:
                _wake(p.has_room)
            except BaseException:
                p.last = prev  # interrupted before returning it: not returned after all
                raise
            return value
        if kind == "end":
            p = self._producer
            p.last = (p.last[0], st)
            raise StopIteration
        raise value

    def get_state(self) -> dict[str, Any]:
        st = self._producer.last[1]
        if st is None:
            st = self._parents[0].get_state()
        return _state.make_state(_STATE_KIND, parent=st)

    def set_state(self, state: dict[str, Any]) -> None:
        _state.expect_state(state, _STATE_KIND, ("parent",))
        parent_state = state["parent"]
        # Restored now, so the parent's own state is reported after it (as Grain does); or, with
        # a thread still in the parent's code, by the next producer (the given state meanwhile).
        self._restore(lambda it: it.set_state(parent_state), parent_state)

    def _get_next_index(self) -> int:
        """As in Grain: the parent's next index at this iterator's position (elements read ahead
        are dropped and the parent moved back there first)."""
        if self._producer.last[1] is not None:
            current = self._producer.last[1]
            if not self._restore(lambda it: it.set_state(current), current):
                raise self._busy_error("get_next_index needs")
        return get_next_index(self._parents[0])

    def _set_next_index(self, index: int) -> None:
        current = self.get_state()["parent"]
        if not self._restore(lambda it: set_next_index(it, index), current):
            raise self._busy_error("set_next_index needs")

    def close(self) -> None:
        self._closed = True
        self._finalizer()
