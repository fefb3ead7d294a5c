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

__all__ = ["ThreadPrefetchIterDataset", "ThreadPrefetchDatasetIterator"]

_STATE_KIND = "ThreadPrefetchDatasetIterator"


class ThreadPrefetchIterDataset(IterDataset):
    """Reads ``parent`` ahead in a background thread, up to ``prefetch_buffer_size`` elements."""

    def __init__(self, parent: IterDataset, prefetch_buffer_size: int):
        if not isinstance(parent, IterDataset):
            raise TypeError(
                f"ThreadPrefetchIterDataset needs an IterDataset parent, got {type(parent).__name__}."
            )
        if isinstance(prefetch_buffer_size, bool) or int(prefetch_buffer_size) < 0:
            raise ValueError(f"prefetch_buffer_size must be >= 0, got {prefetch_buffer_size!r}.")
        super().__init__(parent)
        self.prefetch_buffer_size = int(prefetch_buffer_size)

    def __iter__(self) -> DatasetIterator:
        parent_it = iter(self._parents[0])
        if self.prefetch_buffer_size == 0:
            return parent_it
        return ThreadPrefetchDatasetIterator(parent_it, self.prefetch_buffer_size)


_END = object()


class _Producer:
    """The thread's side; holds no reference to the consumer iterator so that it can be collected."""

    def __init__(self, parent: DatasetIterator, size: int):
        self.parent = parent
        self.size = size
        self.cond = threading.Condition()
        self.buffer: collections.deque[tuple[Any, Any, Any]] = collections.deque()
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
        parent, cond, buf = self.parent, self.cond, self.buffer
        while True:
            with cond:
                while len(buf) >= self.size and not self.stop_flag:
                    cond.wait()
                if self.stop_flag:
                    return
            try:
                x = next(parent)
                item = ("x", x, parent.get_state())
            except StopIteration:
                item = ("end", _END, parent.get_state())
            except BaseException as e:  # re-raised by the consumer at this position
                item = ("err", e, None)  # type: ignore[assignment]
            with cond:
                if self.stop_flag:
                    return
                buf.append(item)
                cond.notify_all()
                if item[0] != "x":
                    return

    def get(self) -> tuple[Any, Any, Any]:
        with self.cond:
            while not self.buffer:
                if self.thread is None or not self.thread.is_alive():
                    if not self.buffer:
                        raise RuntimeError("thread prefetch stopped unexpectedly")
                self.cond.wait(0.1)
            item = self.buffer.popleft()
            if item[0] == "x":
                self.cond.notify_all()
            else:
                self.buffer.appendleft(item)  # end and errors repeat
            return item

    def stop(self) -> None:
        with self.cond:
            self.stop_flag = True
            self.buffer.clear()
            self.cond.notify_all()
        t = self.thread
        if t is not None and t is not threading.current_thread():
            t.join()
        self.thread = None

    def shutdown(self) -> None:
        self.stop()
        self.parent.close()


class ThreadPrefetchDatasetIterator(DatasetIterator):
    """See the module docstring."""

    one_to_one = True

    def __init__(self, parent: DatasetIterator, prefetch_buffer_size: int):
        super().__init__(parent)
        self._producer = _Producer(parent, prefetch_buffer_size)
        # None until the thread starts: the parent's own state then (the runtime may still call
        # set_slice upstream, which changes it, e.g. in an mp_prefetch worker).
        self._state: Any = None
        self._closed = False
        self._finalizer = weakref.finalize(self, self._producer.shutdown)

    def _start(self) -> None:
        if self._state is None:
            self._state = self._parents[0].get_state()
        self._producer.start()

    def start_prefetch(self) -> None:
        if not self._closed:
            self._start()

    def __next__(self) -> Any:
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        p = self._producer
        self._start()
        kind, value, st = p.get()
        if kind == "x":
            self._state = st
            return value
        if kind == "end":
            self._state = st
            raise StopIteration
        raise value

    def get_state(self) -> dict[str, Any]:
        st = self._state if self._state is not None else self._parents[0].get_state()
        return _state.make_state(_STATE_KIND, parent=st)

    def set_state(self, state: dict[str, Any]) -> None:
        _state.expect_state(state, _STATE_KIND, ("parent",))
        self._producer.stop()
        self._parents[0].set_state(state["parent"])
        self._state = state["parent"]

    def close(self) -> None:
        self._closed = True
        self._finalizer()
