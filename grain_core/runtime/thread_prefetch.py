"""``ThreadPrefetchIterDataset``: a parent iterator read ahead by one background thread.

Contract:

* One daemon thread reads the parent into a buffer of at most ``prefetch_buffer_size`` elements
  (``0`` returns the parent's iterator unchanged). ``start_prefetch()`` starts the thread before the
  first ``next()``; otherwise the first ``next()`` does.
* Each buffered element carries the parent's state after it; ``get_state()`` is the state after the
  last element returned, so prefetched-but-unconsumed elements are never lost by a checkpoint.
* ``set_state`` stops and joins the thread, restores the parent and restarts lazily: no thread leaks.
* An exception in the parent is re-raised at the position where it happened. ``close()`` (also ``with``
  and garbage collection) stops and joins the thread and closes the parent.
"""

from __future__ import annotations

import collections
import threading
import weakref
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


class _Producer:
    """The thread's side; holds no reference to the consumer iterator so that it can be collected.

    The buffer holds ``(seq, kind, value, state)``. The consumer takes no lock: it reads
    ``buffer[0]``, commits by storing ``last = (seq, state)`` and removes the item at its next call,
    so an exception raised into ``next()`` (Ctrl-C) never loses or repeats an element. The two
    sides wake each other with tokens (locks released to signal, acquired with a timeout to wait)."""

    def __init__(self, parent: DatasetIterator, size: int):
        self.parent = parent
        self.size = size
        self.buffer: collections.deque[tuple[int, str, Any, Any]] = collections.deque()
        self.has_data = _token()
        self.has_room = _token()
        self.seq = 0
        # (seq of the last item returned, the parent's state after it): the consumer's commit.
        # The head of the buffer may be that item still (removed at the next call): it is free room.
        self.last: tuple[int, Any] = (0, None)
        self.stop_flag = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is None:
            self.stop_flag = False
            self.thread = threading.Thread(
                target=self.run, name="grain_core-thread-prefetch", daemon=True
            )
            self.thread.start()

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as e:  # a bug here must reach the consumer, not end the thread silently
            if not self.stop_flag:
                self.seq += 1
                self.buffer.append((self.seq, "err", e, None))
                _wake(self.has_data)

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
            if self.stop_flag:
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
        self.stop_flag = True
        _wake(self.has_room)
        t = self.thread
        if t is not None and t is not threading.current_thread():
            t.join()
        self.buffer.clear()
        self.thread = None

    def shutdown(self) -> None:
        self.stop()
        close = getattr(self.parent, "close", None)
        if close is not None:
            close()


class ThreadPrefetchDatasetIterator(DatasetIterator):
    """See the module docstring."""

    one_to_one = True

    def __init__(self, parent: DatasetIterator, prefetch_buffer_size: int):
        # A parent that is not a DatasetIterator (any iterator with get_state / set_state, as
        # Grain accepts) is the one parent, not a sequence of them.
        super().__init__(parent if isinstance(parent, DatasetIterator) else (parent,))
        self._producer = _Producer(parent, prefetch_buffer_size)
        self._closed = False
        self._finalizer = weakref.finalize(self, self._producer.shutdown)

    def _start(self) -> None:
        p = self._producer
        if p.last[1] is None:
            # The parent's state when the thread starts (the runtime may still call set_slice
            # upstream before, which changes it, e.g. in an mp_prefetch worker).
            p.last = (p.last[0], self._parents[0].get_state())
        p.start()

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
        p = self._producer
        p.stop()
        self._parents[0].set_state(state["parent"])
        p.last = (p.seq, None)  # the parent's own state is read when needed (as Grain reports it)

    def _get_next_index(self) -> int:
        """As in Grain: the parent's next index at this iterator's position (elements read ahead
        are dropped and the parent moved back there first)."""
        if self._producer.last[1] is not None:
            self.set_state(self.get_state())
        return get_next_index(self._parents[0])

    def _set_next_index(self, index: int) -> None:
        p = self._producer
        p.stop()
        set_next_index(self._parents[0], index)
        p.last = (p.seq, None)  # the parent's state is read when needed (get_state, next start)

    def close(self) -> None:
        self._closed = True
        self._finalizer()
