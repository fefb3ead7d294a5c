"""Interleave's background threads: each open iterator read ahead by the kernel's
:class:`~grain_core.author.ReadAhead` (``iter_buffer_size``), and openers opening upcoming
iterators ahead (``num_make_iter_threads``), with a consumer side that takes no lock an interrupt
could leave held.

Stopping is bounded: ``close()`` / ``stop()`` wake a thread and wait for it at most
:data:`JOIN_SECONDS` (the kernel's ``ReadAhead.JOIN_SECONDS``). A thread still inside user code
then (a dataset's ``next()`` or ``__iter__`` that takes long) is left to finish on its own: it
closes what it holds when that code returns, so nothing is left open and ``close()`` never hangs,
even right after a ``KeyboardInterrupt``.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import grain_core as grain
from grain_core.author import ReadAhead

#: The longest ``stop()`` waits for a thread to end before leaving it to close what it holds.
JOIN_SECONDS = ReadAhead.JOIN_SECONDS


class _Wake:
    """A wake-up signal between threads: a raw lock used as a binary semaphore.

    The consumer side of interleave takes no ``threading.Condition`` / ``Event`` / ``Queue`` lock: a
    ``KeyboardInterrupt`` landing inside their Python code can leave their lock held, and the
    other thread then blocks forever. ``set`` and ``wait`` are single C calls; every wait has a
    timeout, so a lost wake-up costs a short delay, never a hang.
    """

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        try:
            self._lock.release()
        except RuntimeError:  # already set
            pass

    def wait(self, timeout: float) -> None:
        self._lock.acquire(timeout=timeout)


class _Openers:
    """Threads opening the iterators of upcoming datasets ahead (``num_make_iter_threads``).

    ``submit(index)`` queues an index; ``take(index)`` waits for its iterator (or re-raises what
    opening it raised) and removes it, so an interrupted wait changes nothing. Lock-free on the
    consumer side like ``ReadAhead``. ``stop()`` ends the threads, joins them and closes every
    iterator opened but not taken; one finished after ``stop`` is closed by its thread.
    """

    def __init__(self, open_fn: Any, threads: int):
        self._open = open_fn
        self._todo: collections.deque = collections.deque()
        self._queued: set[int] = set()
        self._results: dict[int, tuple[bool, Any]] = {}
        self._work, self._done = _Wake(), _Wake()
        self._stopped = False
        self._threads = [
            threading.Thread(target=self._run, daemon=True, name="interleave-open")
            for _ in range(threads)
        ]

    def start(self) -> None:
        for t in self._threads:
            if t.ident is None:
                t.start()

    def _run(self) -> None:
        while not self._stopped:
            try:
                index = self._todo.popleft()
            except IndexError:
                self._work.wait(0.05)
                continue
            try:
                result: tuple[bool, Any] = (True, self._open(index))
            except BaseException as e:
                result = (False, e)
            if self._stopped or index not in self._queued:  # stopped, or dropped meanwhile
                if result[0]:
                    result[1].close()
                continue
            self._results[index] = result
            if self._stopped:  # stop() may have dropped the results just before: whoever pops it
                late = self._results.pop(index, None)  # closes it (dict.pop is atomic)
                if late is not None and late[0]:
                    late[1].close()
                continue
            self._done.set()
            self._work.set()  # pass the wake-up on to another thread if more is queued

    def has(self, index: int) -> bool:
        return index in self._queued

    def submit(self, index: int) -> None:
        self._todo.append(index)
        self._queued.add(index)
        self._work.set()

    def take(self, index: int) -> grain.DatasetIterator:
        """Waits for ``index``'s iterator; it stays here until :meth:`forget` (an interrupt before
        the caller stored it loses nothing: the next ``take`` returns it again)."""
        results = self._results
        while index not in results:
            if not any(t.is_alive() for t in self._threads) and index not in results:
                raise RuntimeError(  # bounded: no thread is left to open it
                    "InterleaveIterDataset: the threads opening datasets ahead ended; create a "
                    "new iterator."
                )
            self._done.wait(0.05)
        ok, value = results[index]
        if not ok:
            self.forget(index)  # opened again next time
            raise value
        return value

    def forget(self, index: int) -> None:
        self._results.pop(index, None)
        self._queued.discard(index)

    def drop(self) -> None:
        """Forgets every queued index and closes the iterators opened ahead."""
        self._todo.clear()
        self._queued.clear()
        for index in list(self._results):
            result = self._results.pop(index, None)  # None: a stopping thread took it back
            if result is not None and result[0]:
                result[1].close()

    def stop(self) -> None:
        """Ends the threads, waiting for each at most :data:`JOIN_SECONDS` (one still opening a
        dataset closes that iterator itself when it is opened), and closes what was opened."""
        self._stopped = True
        self._work.set()
        for t in self._threads:
            self._work.set()
            try:
                t.join(JOIN_SECONDS)
            except RuntimeError:  # never started
                pass
        self.drop()


class _Slot:
    """One open dataset: its index, iterator and read-ahead (a :class:`ReadAhead` of the iterator,
    with ``iter_buffer_size``), and the element it holds given back (for iterators that cannot
    move back), with the state before it."""

    __slots__ = ("can_unread", "held", "held_state", "index", "it", "reader")

    def __init__(self, index: int, it: grain.DatasetIterator):
        self.index = index
        self.it = it
        self.can_unread = it.can_unread
        self.held: list[Any] = []
        self.held_state: Any = None
        self.reader: ReadAhead | None = None

    def start_reader(self, buffer: int) -> None:
        """Starts reading ahead ``buffer`` elements in a thread (stopped by :meth:`close`)."""
        reader = ReadAhead(
            self.it, buffer, owner="InterleaveIterDataset", thread_name="interleave-reader"
        )
        self.reader = reader
        reader.start()

    def get_state(self) -> Any:
        if self.reader is not None:
            return self.reader.state
        return self.held_state if self.held else self.it.get_state()

    def close(self) -> None:
        """Stops the read-ahead (bounded) and closes the iterator, or leaves that to the reading
        thread while it is still inside the dataset's code. Idempotent."""
        reader = self.reader
        if reader is None:
            self.it.close()
        else:
            reader.close()


class _Resources:
    """What an interleave iterator holds open: its slots, slots being retired and the threads
    opening iterators ahead.

    Kept apart from the iterator so that a ``weakref.finalize`` can release them (stop reader
    threads, close iterators, stop the opening threads) when the iterator is garbage collected
    unclosed.
    """

    def __init__(self, cycle: int):
        self.slots: list[_Slot | None] = [None] * cycle
        self.retired: list[_Slot] = []
        self.openers: _Openers | None = None

    def close_retired(self) -> None:
        """Closes the slots taken out of the cycle (not those still in it)."""
        while self.retired:
            slot = self.retired[-1]
            if not any(s is slot for s in self.slots):
                slot.close()
            self.retired.pop()

    def drop_pending(self) -> None:
        if self.openers is not None:
            self.openers.drop()

    def close(self) -> None:
        for i, s in enumerate(self.slots):
            if s is not None:
                self.slots[i] = None
                self.retired.append(s)
        self.close_retired()
        if self.openers is not None:
            openers, self.openers = self.openers, None
            openers.stop()
