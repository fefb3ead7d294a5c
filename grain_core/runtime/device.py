"""``grain_core.experimental.device_put``: elements as ``jax.Array`` on a device or sharding.

Contract:

* ``device_put(ds, device, cpu_buffer_size=4, device_buffer_size=2)`` returns an ``IterDataset``
  whose elements are ``ds``'s elements with every leaf converted to a ``jax.Array``:
  ``jax.device_put(leaf, device)`` for a ``jax.Device`` or a single-process ``Sharding``; in a
  multi-process JAX run with a ``Sharding``, each process's element is its *local part* of the global
  batch (``jax.make_array_from_process_local_data``).
* ``cpu_buffer_size`` elements are prepared ahead on the CPU by a background thread
  (:class:`~grain_core.runtime.thread_prefetch.ThreadPrefetchIterDataset`); ``device_buffer_size``
  elements have their (asynchronous) transfers issued ahead of the consumer.
* The state is the CPU pipeline's state after the last element returned; restoring never loses or
  repeats an element that was already transferred ahead.
* ``jax`` is imported only when an element is transferred.
"""

from __future__ import annotations

import collections
from typing import Any

from grain_core import state as _state
from grain_core.dataset.base import IterDataset
from grain_core.dataset.iterator import DatasetIterator

__all__ = ["device_put", "DevicePutIterDataset"]

_STATE_KIND = "DevicePutDatasetIterator"


def device_put(
    ds: IterDataset, device: Any, cpu_buffer_size: int = 4, device_buffer_size: int = 2
) -> IterDataset:
    """Returns ``ds`` with elements placed on ``device`` (a ``jax.Device`` or ``Sharding``)."""
    from grain_core.runtime.thread_prefetch import ThreadPrefetchIterDataset

    if cpu_buffer_size > 0:
        ds = ThreadPrefetchIterDataset(ds, prefetch_buffer_size=cpu_buffer_size)
    return DevicePutIterDataset(ds, device, device_buffer_size)


def _placer(device: Any):
    import jax

    multi = isinstance(device, jax.sharding.Sharding) and jax.process_count() > 1
    if multi:

        def put_leaf(x: Any) -> Any:
            return jax.make_array_from_process_local_data(device, x)

        return lambda element: jax.tree.map(put_leaf, element)
    return lambda element: jax.device_put(element, device)


class DevicePutIterDataset(IterDataset):
    """Transfers elements to ``device`` keeping ``device_buffer_size`` transfers in flight."""

    def __init__(self, parent: IterDataset, device: Any, device_buffer_size: int = 2):
        if int(device_buffer_size) < 0:
            raise ValueError(f"device_buffer_size must be >= 0, got {device_buffer_size}.")
        super().__init__(parent)
        self.device = device
        self.device_buffer_size = int(device_buffer_size)

    def __iter__(self) -> DatasetIterator:
        return _DevicePutIterator(iter(self._parents[0]), self.device, self.device_buffer_size)


class _DevicePutIterator(DatasetIterator):
    """Items ``(seq, kind, value, state, parent_seq)`` are transferred ahead; like the thread
    prefetch iterator, ``next()`` commits by storing ``(seq, state)`` and removes the item at the
    next call, and reads a thread-prefetch parent in two phases (peek, then take), so an exception
    raised into ``next()`` (Ctrl-C) never loses or repeats an element."""

    one_to_one = True

    def __init__(self, parent: DatasetIterator, device: Any, ahead: int):
        super().__init__(parent)
        self._device = device
        self._ahead = max(1, ahead)
        self._put: Any = None
        self._buffer: collections.deque[tuple[int, str, Any, Any, Any]] = collections.deque()
        self._seq = 0
        self._last: tuple[int, Any] = (0, None)  # (seq returned last, the parent's state after it)
        self._end = False
        self._pending: tuple[int, Any] | None = None  # (seq, element) read, not yet buffered

    def _occupied(self) -> int:
        buf = self._buffer
        n = len(buf)
        if n and buf[0][0] <= self._last[0]:
            n -= 1
        return n

    def _fill(self) -> None:
        from grain_core.runtime.thread_prefetch import ThreadPrefetchDatasetIterator

        if self._put is None:
            self._put = _placer(self._device)
        parent = self._parents[0]
        if self._last[1] is None:
            self._last = (self._last[0], parent.get_state())
        buf = self._buffer
        tp = parent if isinstance(parent, ThreadPrefetchDatasetIterator) else None
        while not self._end and self._occupied() < self._ahead:
            if buf and buf[-1][1] == "err":
                return
            if tp is None:
                # The element read from the parent is held in _pending (with the sequence number
                # it gets) until it is in the buffer, so an interrupt in between loses nothing;
                # its number tells whether it got there before an interruption.
                if self._pending is None:
                    try:
                        # parent.__next__() rather than next(parent): a Python-level call, after
                        # whose return CPython checks for no signal before the store.
                        self._pending = (self._seq + 1, parent.__next__())
                    except StopIteration:
                        self._end = True
                        return
                seq, x = self._pending
                if not (buf and buf[-1][0] == seq):
                    # jax.device_put is asynchronous: the transfer proceeds while later elements
                    # are read.
                    placed = self._put(x)
                    buf.append((seq, "x", placed, parent.get_state(), None))
                self._seq = seq
                self._pending = None
                continue
            item = tp._peek()
            pseq, kind, value, st = item
            if buf and buf[-1][4] == pseq:  # added before an interruption: take it now
                tp._take(item)
                continue
            if kind == "end":
                self._end = True
                return
            self._seq += 1
            if kind == "err":
                buf.append((self._seq, "err", value, None, pseq))  # raised when it is next
                return
            buf.append((self._seq, "x", self._put(value), tp._state_after(item), pseq))
            tp._take(item)

    def __next__(self) -> Any:
        buf = self._buffer
        while buf and buf[0][0] <= self._last[0]:
            buf.popleft()  # returned already
        if not buf:
            self._fill()
            if not buf:
                raise StopIteration
        seq, kind, value, st, _ = buf[0]
        if kind == "err":
            raise value
        prev = self._last
        self._last = (seq, st)  # the commit; the item is removed at the next call
        try:
            self._fill()  # keep device_buffer_size transfers in flight
        except BaseException:
            self._last = prev  # interrupted before returning it: not returned after all
            raise
        return value

    def rollback_mark(self) -> Any:
        """See :func:`grain_core.runtime.api.next_or_rollback`."""
        return self._last

    def rollback(self, mark: Any) -> None:
        buf = self._buffer
        if self._last is not mark and buf and buf[0][0] == self._last[0]:
            self._last = mark

    def get_state(self) -> dict[str, Any]:
        st = self._last[1] if self._last[1] is not None else self._parents[0].get_state()
        return _state.make_state(_STATE_KIND, parent=st)

    def set_state(self, state: dict[str, Any]) -> None:
        _state.expect_state(state, _STATE_KIND, ("parent",))
        self._parents[0].set_state(state["parent"])
        self._buffer.clear()
        self._pending = None
        self._end = False
        self._last = (self._seq, state["parent"])
