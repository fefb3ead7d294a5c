"""``IterDataset`` stages that change how many elements come out: ``batch``, ``FlatMapIterDataset``
and ``LimitIterDataset``, and the snapshot iterator the flat map shares with ``reshape_ops``."""

from __future__ import annotations

from typing import Any

from grain_core import state as _state
from grain_core import transforms as tr
from grain_core.dataset.base import IterDataset
from grain_core.dataset.batching import stack_batch
from grain_core.dataset.callables import as_callable
from grain_core.dataset.chunking import can_unread, unread
from grain_core.dataset.next_index import get_next_index, set_next_index
from grain_core.dataset.stages import OneParentIterator, OneParentIterDataset
from grain_core.state import StateField
from grain_core.validation import check_int


class BatchIterDataset(OneParentIterDataset):
    """``batch_size`` consecutive elements stacked leafwise (the last one smaller unless dropped)."""

    def __init__(self, parent: IterDataset, batch_size: int, *, drop_remainder=False, batch_fn=None):
        super().__init__(parent)
        self._bs = tr.check_batch_size(batch_size)
        self._drop = bool(drop_remainder)
        self._batch_fn = tr.check_batch_fn(batch_fn)

    def __iter__(self):
        return _BatchIterator(iter(self._parent), self._bs, self._drop, self._batch_fn)

    def __str__(self):
        return f"BatchIterDataset(batch_size={self._bs}, drop_remainder={self._drop})"


class _BatchIterator(OneParentIterator):
    kind = "BatchIterDataset"

    def __init__(self, parent, bs, drop, batch_fn):
        super().__init__(parent)
        self._parent = parent  # Grain's attribute, set: read per element
        self._bs, self._drop, self._batch_fn = bs, drop, batch_fn
        self._rewind = can_unread(parent)
        # After an interrupt, with a parent that cannot move back: the elements read for the
        # interrupted batch and the parent's state before them (the state until it is returned).
        self._held: tuple[list[Any], Any] | None = None
        # After an interrupt: (items, before) still to give back (see _give_back), noted with a
        # plain store first; a second interrupt during the give-back leaves it for the next call.
        self._owed: tuple[list[Any], Any] | None = None

    def _get_next_index(self) -> int:
        """The batch produced next, from the parent's next element (Grain's rule)."""
        return (get_next_index(self._parent) + self._bs - 1) // self._bs

    def _set_next_index(self, index: int) -> None:
        self._held = self._owed = None
        set_next_index(self._parent, index * self._bs)

    def __next__(self):
        """One batch. Its elements are pulled with ``next_chunk`` into ``items`` in one step
        (``items += ...``), so an interrupt (``KeyboardInterrupt``) anywhere, stacking included,
        finds them there and gives them back: ``unread`` after one parent call, the parent's
        state from before the batch after several (noted when a second call becomes necessary),
        or, for parents that cannot move back, held here with that state for the next call. An
        ``Exception`` propagates and the elements read are consumed, as in Grain."""
        if self._owed is not None:
            self._give_back()
        parent, bs = self._parent, self._bs
        held = self._held
        items: list[Any] = [] if held is None else list(held[0])
        before = None if held is None else held[1]
        try:
            if before is None and not self._rewind:
                before = parent.get_state()
            while len(items) < bs:
                n0 = len(items)
                try:
                    items += parent.next_chunk(bs - n0)
                except StopIteration:
                    if not items or self._drop:
                        raise
                    break
                if len(items) > bs:
                    raise RuntimeError(
                        f"{type(parent).__name__}.next_chunk({bs - n0}) returned "
                        f"{len(items) - n0} elements; next_chunk must return at most max_elements."
                    )
                if before is None and n0 == 0 and len(items) < bs:
                    # More calls follow: note where the batch began, so an interrupt in one of
                    # them can put the parent back (the elements are served again from replay).
                    k = len(items)
                    unread(parent, k)
                    items = []
                    before = parent.get_state()
                    while len(items) < k:
                        items += parent.next_chunk(k - len(items))
            batch = stack_batch(items, self._batch_fn)
        except Exception:
            self._held = None
            raise
        except BaseException:
            self._owed = (items, before)  # first, a plain store
            self._give_back()
            raise
        self._held = None  # the commit
        return batch

    def _give_back(self) -> None:
        """After an interrupt: leaves the parent (or ``_held``) so the next call rebuilds the
        interrupted batch from the same elements (``_owed``: its elements and the parent's state
        before them). Each way ends with one store after its last call; ``set_state`` is
        idempotent, so an interrupt inside it leaves ``_owed`` for the next call."""
        items, before = self._owed  # type: ignore[misc]
        if not self._rewind:
            self._held, self._owed = ((items, before) if items else None), None
        elif before is not None:
            self._parent.set_state(before)
            self._held, self._owed = None, None
        else:
            n = len(items)
            if n:
                unread(self._parent, n)
            self._owed = None

    def get_state(self):
        if self._owed is not None:
            self._give_back()
        held = self._held
        if held is None:
            return super().get_state()
        return _state.make_state(self.kind, parent=held[1], **self.position_state())

    def restore_position(self, state):
        self._held = self._owed = None

    def position_fields(self):
        return {"batch_size": StateField.identity()}

    def position_state(self):
        return {"batch_size": self._bs}


class _SnapshotIterator(OneParentIterator):
    """An iterator that expands each parent element into a list, restoring by replay: its state is
    the parent's state before the current element plus how far into the expansion it got."""

    def __init__(self, parent):
        super().__init__(parent)
        self._parent = parent  # Grain's attribute, set: read per element
        self._before = parent.get_state()
        self._pending: list[Any] = []
        self._taken = 0
        # The parent element whose expansion was interrupted, and the parent's state before it:
        # expanded again by the next pull (the state meanwhile is the previous expansion's end).
        self._held: tuple[Any, Any] | None = None

    def _expand(self, x: Any) -> list[Any]:
        raise NotImplementedError

    def _pull(self) -> None:
        """Expands the next parent element. On ``StopIteration`` (or an error) nothing changes, so
        the state after exhaustion still points at the last element and restores to exhaustion.
        Interrupted inside the expansion (``KeyboardInterrupt``), the element is held and expanded
        again by the next call."""
        held = self._held
        if held is not None:
            before, x = held
        else:
            before = self._parent.get_state()
            x = self._parent.__next__()  # not next(): no interrupt between its return and `try`
        try:
            pending = self._expand(x)
        except Exception:
            raise
        except BaseException:
            self._held = (before, x)  # first, a plain store
            raise
        self._held = None  # the commit: plain assignments, no call
        self._before, self._pending, self._taken = before, pending, 0

    def get_state(self):
        return _state.make_state(self.kind, parent=self._before, taken=self._taken, **self.position_state())

    def state_fields(self):
        return {"parent": StateField.opaque(nullable=False), "taken": StateField.position(),
                **self.position_fields()}

    def restore_state(self, state):
        taken = int(state["taken"])
        self._parent.set_state(state["parent"])
        self._before = state["parent"]
        self._pending, self._taken, self._held = [], 0, None
        if taken:
            try:
                self._pull()
            except StopIteration:
                raise _state.StateMismatchError(
                    f"The {self.kind!r} state is {taken} elements into a parent element, but "
                    "the parent has no element there: the state comes from another pipeline."
                ) from None
            self._taken = taken


class FlatMapIterDataset(OneParentIterDataset):
    """Each element replaced by the elements ``transform.flat_map(element)`` returns."""

    def __init__(self, parent: IterDataset, transform: Any):
        super().__init__(parent)
        self._transform = transform
        self._fn = as_callable(transform, tr.FlatMap, "FlatMapIterDataset")

    def __iter__(self):
        return _FlatMapIterator(iter(self._parent), self._fn)


class _FlatMapIterator(_SnapshotIterator):
    kind = "FlatMapIterDataset"

    def __init__(self, parent, fn):
        super().__init__(parent)
        self._fn = fn

    def _expand(self, x):
        return list(self._fn(x))

    def __next__(self):
        while self._taken >= len(self._pending):
            self._pull()
        x = self._pending[self._taken]
        self._taken += 1
        return x


class LimitIterDataset(OneParentIterDataset):
    """At most ``count`` elements of the parent."""

    def __init__(self, parent: IterDataset, count: int):
        super().__init__(parent)
        self._count = check_int(count, "LimitIterDataset count", minimum=1)

    def __iter__(self):
        return _LimitIterator(iter(self._parent), self._count)


class _LimitIterator(OneParentIterator):
    kind = "LimitIterDataset"

    def __init__(self, parent, limit):
        super().__init__(parent)
        self._parent = parent  # Grain's attribute, set: read per element
        self._limit, self._count = limit, 0

    def _get_next_index(self) -> int:
        """The elements returned so far (Grain's rule)."""
        return self._count

    def _set_next_index(self, index: int) -> None:
        set_next_index(self._parent, index)
        self._count = index

    def __next__(self):
        if self._count >= self._limit:
            raise StopIteration
        x = self._parent.__next__()
        self._count += 1
        return x

    def next_chunk(self, max_elements: int) -> list[Any]:
        if self._count >= self._limit:
            raise StopIteration
        out = self._parent.next_chunk(min(max_elements, self._limit - self._count))
        self._count += len(out)
        return out

    def position_fields(self):
        return {"count": StateField.position()}

    def position_state(self):
        return {"count": self._count}

    def restore_position(self, state):
        self._count = int(state["count"])


# RebatchIterDataset, ZipIterDataset and RepeatIterDataset live in reshape_ops.
