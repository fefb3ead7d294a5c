"""``ThreadPrefetchIterDataset``: a parent iterator read ahead by one background thread.

The reading is :class:`~grain_core.runtime.read_ahead.ReadAhead` (the kernel's one read-ahead,
which the interleave plugin uses too); this module adds the stage, its state format and Grain's
next-index helpers. Contract:

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
  its own: it can publish nothing after (the iterator reads on with a fresh thread), the parent
  is used by one thread at a time (the restore is applied by the next thread once the old thread
  has left the parent; ``get_state()`` reports the restored state meanwhile), and the parent of a
  closed iterator is closed by that thread when it leaves. Grain's ``get/set_next_index`` need the
  parent itself: they raise a clear ``RuntimeError`` in that case and keep the position.
"""

from __future__ import annotations

import weakref
from typing import Any

from grain_core import state as _state
from grain_core.dataset.base import DatasetIterator, IterDataset
from grain_core.dataset.next_index import get_next_index, set_next_index
from grain_core.runtime.read_ahead import JOIN_SECONDS, ReadAhead
from grain_core.validation import check_instance

__all__ = ["JOIN_SECONDS", "ThreadPrefetchIterDataset", "ThreadPrefetchDatasetIterator"]

_STATE_KIND = "ThreadPrefetchDatasetIterator"
_ELEMENT, _END = ReadAhead.ELEMENT, ReadAhead.END


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


class ThreadPrefetchDatasetIterator(DatasetIterator):
    """See the module docstring: a :class:`~grain_core.runtime.read_ahead.ReadAhead` of the parent
    with this stage's state format and Grain's next-index helpers."""

    one_to_one = True

    def __init__(self, parent: DatasetIterator, prefetch_buffer_size: int):
        # A parent that is not a DatasetIterator (any iterator with get_state / set_state, as
        # Grain accepts) is the one parent, not a sequence of them.
        super().__init__(parent if isinstance(parent, DatasetIterator) else (parent,))
        self._ahead = ReadAhead(
            parent,
            prefetch_buffer_size,
            owner="ThreadPrefetchDatasetIterator",
            thread_name="grain_core-thread-prefetch",
        )
        self._closed = False
        self._finalizer = weakref.finalize(self, self._ahead.close)

    def _busy_error(self, what: str) -> RuntimeError:
        return RuntimeError(
            f"ThreadPrefetchDatasetIterator: {what} the parent iterator, but the prefetch thread "
            f"is still inside the parent's code after {JOIN_SECONDS} s (a map function that "
            "blocks or takes long?). The iterator stays at its position; call it again once that "
            "call has returned."
        )

    def start_prefetch(self) -> None:
        if not self._closed:
            self._ahead.start()

    def _peek(self) -> tuple[int, str, Any, Any]:
        """The next item ``(seq, kind, value, state)`` without taking it (see ``_take``)."""
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        return self._ahead.peek(1)[0]

    @staticmethod
    def _state_after(item: tuple[int, str, Any, Any]) -> dict[str, Any]:
        """This iterator's state once ``item`` (from ``_peek``) has been returned."""
        return _state.make_state(_STATE_KIND, parent=item[3])

    def _take(self, item: tuple[int, str, Any, Any]) -> None:
        """Commits ``item`` (from ``_peek``, kind ``"x"``) as returned."""
        self._ahead.mark = (item[0], item[3])

    def rollback_mark(self) -> Any:
        """A mark for :meth:`rollback` (see :func:`grain_core.runtime.api.next_or_rollback`)."""
        return self._ahead.mark

    def rollback(self, mark: Any) -> None:
        """Un-returns the element returned since ``mark``, if exactly one was (its caller was
        interrupted before it got it)."""
        self._ahead.give_back(mark)

    def __next__(self) -> Any:
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        ahead = self._ahead
        item = ahead.peek(1)[0]
        kind = item[1]
        if kind is _ELEMENT:
            return ahead.take(item)
        if kind is _END:
            ahead.mark = (ahead.mark[0], item[3])
            raise StopIteration
        raise item[2]

    def get_state(self) -> dict[str, Any]:
        return _state.make_state(_STATE_KIND, parent=self._ahead.state)

    def set_state(self, state: dict[str, Any]) -> None:
        _state.expect_state(state, _STATE_KIND, ("parent",))
        parent_state = state["parent"]
        # Restored now, so the parent's own state is reported after it (as Grain does); or, with
        # a thread still in the parent's code, by the next thread (the given state meanwhile).
        self._ahead.restore(lambda it: it.set_state(parent_state), parent_state)

    def _get_next_index(self) -> int:
        """As in Grain: the parent's next index at this iterator's position (elements read ahead
        are dropped and the parent moved back there first)."""
        current = self._ahead.mark[1]
        if current is not None:
            if not self._ahead.restore(lambda it: it.set_state(current), current):
                raise self._busy_error("get_next_index needs")
        return get_next_index(self._parents[0])

    def _set_next_index(self, index: int) -> None:
        current = self.get_state()["parent"]
        if not self._ahead.restore(lambda it: set_next_index(it, index), current):
            raise self._busy_error("set_next_index needs")

    def close(self) -> None:
        self._closed = True
        self._finalizer()
