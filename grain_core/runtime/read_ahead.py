"""``ReadAhead``: an iterator read ahead by one background thread, with exact states.

The one read-ahead of grain_core: thread prefetch
(:class:`~grain_core.runtime.thread_prefetch.ThreadPrefetchIterDataset`, and through it
``device_put`` and ``multithread_prefetch``) and the interleave plugin's ``iter_buffer_size`` are
built on it; a plugin uses it as ``from grain_core.author import ReadAhead``
(``docs/writing-plugins.md``, "Reading ahead in a thread").

Contract:

* **Items.** One daemon thread calls ``next(it)`` and then ``it.get_state()``, and appends an item
  ``(seq, kind, value, state)`` (a plain tuple) to a buffer: ``kind`` is :attr:`ReadAhead.ELEMENT`
  (``value`` the element, ``state`` the iterator's state after it), :attr:`ReadAhead.END` (the
  iterator is exhausted; ``state`` its state at the end) or :attr:`ReadAhead.ERROR` (``value`` the
  exception ``next`` raised, to be raised by the consumer at that position; ``state`` ``None``).
  ``seq`` counts the items, one by one. After an END or ERROR the thread ends.
* **The consumer's commit.** :attr:`ReadAhead.mark` is ``(seq, state)`` of the last item the
  consumer took, ``(0, state before the first)`` at first. Taking items is one assignment to
  ``mark`` (``(item[0], item[3])`` of the last one) or :meth:`ReadAhead.take`; nothing is removed
  while the consumer decides: :meth:`ReadAhead.peek` drops the items at or before the mark when it
  is next called. So an exception raised into the consumer (Ctrl-C) between reading an item and
  committing it loses and repeats nothing, and setting ``mark`` back to an earlier value before
  the next ``peek`` takes the items after it again (give-back). :attr:`ReadAhead.state` is the
  iterator's state after what was taken: a checkpoint never loses what was read ahead.
* **Bounded buffer.** The thread keeps at most ``size`` items past the mark.
* **No lock on the consumer's side.** The consumer takes no lock an interrupt could leave held;
  the two sides wake each other with raw locks released as signals, and every wait is bounded.
* **Bounded stops.** :meth:`ReadAhead.restore` and :meth:`ReadAhead.close` (also a
  ``weakref.finalize`` of the owner) stop the thread and wait for it at most
  :data:`JOIN_SECONDS`. A thread still inside the iterator's code then (a map function that
  blocks) is left to finish on its own: it publishes nothing more (reading goes on with a fresh
  thread), the iterator is used by one thread at a time (a restore is applied by the next thread
  once the old one has left, and :attr:`ReadAhead.state` reports the restored state meanwhile),
  and a closed iterator is closed by that thread when it leaves. Neither ever waits on user code
  longer than :data:`JOIN_SECONDS`, even right after a ``KeyboardInterrupt``.
* **One consumer.** Every method is called by one consumer thread at a time (the owner's
  concurrency guard sees to it); only the reading thread runs beside it.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from grain_core.validation import check_int

__all__ = ["JOIN_SECONDS", "ReadAhead"]

#: The longest :meth:`ReadAhead.restore` / :meth:`ReadAhead.close` wait for the reading thread to
#: end. A thread still inside the iterator's code then is left to finish on its own.
JOIN_SECONDS = 1.0

_NONE = object()  # no restore waiting

Item = tuple  # (seq, kind, value, state)


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


class _Reading:
    """One reading thread and its buffer. A ``_Reading`` runs once: after :meth:`stop` the
    ``ReadAhead`` makes a fresh one, so a stopped thread still inside the iterator's code has
    nowhere to publish what it returns. Holds no reference to the owner of the ``ReadAhead``, so
    that the owner can be collected (its finalizer closes the ``ReadAhead``)."""

    def __init__(self, shared: ReadAhead, seq: int, state: Any = None):
        self.shared = shared
        self.buffer: collections.deque[Item] = collections.deque()
        self.has_data = _token()
        self.has_room = _token()
        self.seq = seq  # the last item's number
        self.last: tuple[int, Any] = (seq, state)  # the consumer's mark
        self.stop_flag = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.thread is None and not self.stop_flag:
            self.thread = threading.Thread(
                target=self.run, name=self.shared.thread_name, daemon=True
            )
            self.thread.start()

    def run(self) -> None:
        shared, entered = self.shared, False
        try:
            while True:  # a stopped thread may still be inside the iterator: wait until it leaves
                with shared._lock:
                    if self.stop_flag or shared._closed or shared._close_requested:
                        return
                    if shared._user is None:
                        shared._user, entered = self, True
                        pending, shared._pending = shared._pending, _NONE
                        break
                shared._left.acquire(timeout=0.05)
            if pending is not _NONE:
                shared.it.set_state(pending)
            self.produce()
        except BaseException as e:  # a bug here must reach the consumer, not end the thread silently
            if not self.stop_flag:
                self.seq += 1
                self.buffer.append((self.seq, ReadAhead.ERROR, e, None))
                _wake(self.has_data)
        finally:
            if entered:
                shared._leave()

    def produce(self) -> None:
        it, buf, size = self.shared.it, self.buffer, self.shared.size
        while True:
            while self.occupied() >= size and not self.stop_flag:
                self.has_room.acquire(timeout=0.1)
            if self.stop_flag:
                return
            try:
                x = next(it)
                kind, value, st = ReadAhead.ELEMENT, x, it.get_state()
            except StopIteration:
                kind, value, st = ReadAhead.END, None, it.get_state()
            except BaseException as e:  # raised by the consumer at this position
                kind, value, st = ReadAhead.ERROR, e, None
            if self.stop_flag:  # stopped while in the iterator's code: the item is dropped
                return
            self.seq += 1
            buf.append((self.seq, kind, value, st))
            _wake(self.has_data)
            if kind is not ReadAhead.ELEMENT:
                return

    def occupied(self) -> int:
        """Items past the consumer's mark. Reads numbers only, never the buffer the consumer
        drops items from, so it cannot race with it (the count is exact, or larger for a moment
        after a give-back moved the mark back)."""
        return self.seq - self.last[0]

    def stop(self) -> None:
        """Stops the thread, waiting for it at most :data:`JOIN_SECONDS`. Never starts again."""
        self.stop_flag = True
        _wake(self.has_room)
        t = self.thread
        if t is not None and t is not threading.current_thread():
            try:
                t.join(JOIN_SECONDS)
            except RuntimeError:  # its start() was interrupted: it never ran
                pass
        self.buffer.clear()


class ReadAhead:
    """Reads the iterator ``it`` ahead in one background thread, up to ``size`` items past the
    consumer's mark (see the module docstring for the contract).

    Args:
      it: a ``DatasetIterator`` (or any iterator with ``get_state`` / ``set_state``); from now on
        only this object uses it.
      size: the most items read ahead (>= 1).
      owner: the name that error messages give (e.g. the stage's iterator class).
      thread_name: the reading thread's name.
    """

    ELEMENT = "x"  #: an item holding an element and the iterator's state after it
    END = "end"  #: the iterator is exhausted (its state at the end)
    ERROR = "err"  #: ``next`` raised the item's value (raised by the consumer at this position)
    JOIN_SECONDS = JOIN_SECONDS  #: the longest wait of a stop (see the module's JOIN_SECONDS)

    def __init__(
        self,
        it: Any,
        size: int,
        *,
        owner: str = "ReadAhead",
        thread_name: str = "grain_core-read-ahead",
    ):
        self.size = check_int(size, f"{owner}: the read-ahead size", minimum=1)
        self.it = it
        self.owner = owner
        self.thread_name = thread_name
        # Held for a few assignments only (and for the consumer's own short calls of the
        # iterator while no thread is inside), never while a thread is in the iterator's code.
        # Re-entrant: garbage collection may run an owner's finalizer (close) in the reading
        # thread while that thread holds it.
        self._lock = threading.RLock()
        self._user: _Reading | None = None  # the thread inside the iterator
        self._pending: Any = _NONE  # a state to restore before the next read
        self._close_requested = False
        self._closed = False
        self._left = _token()  # released when a thread leaves the iterator
        self._reading = _Reading(self, 0)

    # --- the consumer's side -------------------------------------------------------------------

    @property
    def mark(self) -> tuple[int, Any]:
        """``(seq, state)`` of the last item taken; assigning it is the consumer's commit."""
        return self._reading.last

    @mark.setter
    def mark(self, mark: tuple[int, Any]) -> None:
        r = self._reading
        r.last = mark
        _wake(r.has_room)

    @property
    def state(self) -> Any:
        """The iterator's state after the items taken (its own state before the thread starts)."""
        st = self._reading.last[1]
        return self.it.get_state() if st is None else st

    def start(self) -> None:
        """Starts the thread if it is not running (it also starts at the first :meth:`peek`).
        After a :meth:`restore` that an interrupt cut short, reads on from the mark's state."""
        r = self._reading
        if r.stop_flag:
            if self._closed or self._close_requested:
                raise RuntimeError(f"{self.owner}: read after close(); create a new iterator.")
            st = r.last[1]
            if st is None:  # its thread never started
                self._reading = r = _Reading(self, r.seq)
            else:
                self.restore(lambda it: it.set_state(st), st)
                r = self._reading
        if r.last[1] is None:
            # The state when the thread starts (a runtime may still move the iterator before,
            # e.g. set_slice upstream in an mp_prefetch worker). No thread is in the iterator
            # while the mark has no state (see restore).
            r.last = (r.last[0], self.it.get_state())
        r.start()

    def peek(self, n: int = 1, wait: bool = True) -> list[Item]:
        """Up to ``n`` items after the mark, oldest first, waiting (bounded) for one if ``wait``;
        an END or ERROR item can only be the last. Takes nothing (see :attr:`mark`)."""
        r = self._reading
        if r.thread is None or r.stop_flag:
            self.start()
            r = self._reading
        buf, taken = r.buffer, r.last[0]
        while buf and buf[0][0] <= taken:
            buf.popleft()
        while wait and not buf:
            t = r.thread
            if t is None or not t.is_alive():
                if buf:
                    break
                raise RuntimeError(
                    f"{self.owner}: the read-ahead thread ended without a result (it was "
                    "stopped, or failed outside the iterator's code); create a new iterator."
                )
            r.has_data.acquire(timeout=0.1)
        if n == 1:
            return [buf[0]] if buf else []
        out = []
        for i in range(min(n, len(buf))):
            item = buf[i]
            out.append(item)
            if item[1] is not ReadAhead.ELEMENT:
                break
        return out

    def take(self, item: Item) -> Any:
        """Commits the ELEMENT ``item`` (the first after the mark, from :meth:`peek`) and returns
        its element. Interrupted before it returns, the item is not taken."""
        r = self._reading
        prev = r.last
        r.last = (item[0], item[3])  # the commit
        try:
            _wake(r.has_room)
        except BaseException:
            r.last = prev  # interrupted before returning it: not taken after all
            raise
        return item[2]

    def give_back(self, mark: tuple[int, Any]) -> None:
        """Un-takes the one item taken since ``mark`` (a value of :attr:`mark` read before), if
        exactly one was and no :meth:`peek` has run since; otherwise does nothing."""
        r = self._reading
        if r.last is not mark and r.buffer and r.buffer[0][0] == r.last[0]:
            r.last = mark

    def restore(self, apply: Callable[[Any], None], state_if_busy: Any) -> bool:
        """Drops what was read ahead and moves the iterator: stops the thread (bounded) and calls
        ``apply(it)`` now, returning True; or, when a stopped thread is still inside the
        iterator's code, leaves the iterator to be restored to ``state_if_busy`` by the next
        thread when it enters, returning False. Either way reading goes on with a fresh thread
        (started by the next :meth:`peek`); an error of ``apply`` is raised."""
        old = self._reading
        old.stop()
        new = _Reading(self, old.seq)
        self._reading = new
        with self._lock:
            if self._user is None:  # nobody inside: move the iterator now
                self._pending = _NONE
                apply(self.it)
                return True
            self._pending = state_if_busy
        new.last = (new.seq, state_if_busy)
        return False

    def close(self) -> None:
        """Stops the thread (waiting at most :data:`JOIN_SECONDS`) and closes the iterator, now
        or, if a stopped thread is still inside it, when that thread leaves. Idempotent."""
        self._reading.stop()
        with self._lock:
            if self._closed or self._close_requested:
                return
            if self._user is None:
                self._closed = True
                close_now = True
            else:
                self._close_requested = True
                close_now = False
        if close_now:
            close = getattr(self.it, "close", None)
            if close is not None:
                close()

    # --- the thread's side ---------------------------------------------------------------------

    def _leave(self) -> None:
        """Called by a reading thread leaving the iterator: closes it if the consumer closed this
        ``ReadAhead`` meanwhile (nobody is left to report an error of that close to)."""
        with self._lock:
            self._user = None
            close = self._close_requested and not self._closed
            if close:
                self._closed = True
        _wake(self._left)
        if close:
            try:
                close_fn = getattr(self.it, "close", None)
                if close_fn is not None:
                    close_fn()
            except Exception:  # noqa: S110  (no consumer left to raise it to)
                pass
