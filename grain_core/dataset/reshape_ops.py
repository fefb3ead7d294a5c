"""``RebatchIterDataset``, ``ZipIterDataset`` and ``RepeatIterDataset``: stages that read several
parent elements (or several parents, or several parent iterators) for one element they return.

Interrupts. Each of them computes what it returns first and commits with plain assignments after
its last call (Python raises ``KeyboardInterrupt`` only at a call or a loop's back edge), and keeps
what it read from its parents before an interrupt, so that calling ``next()`` again continues with
exactly the elements not yet returned and ``get_state()`` is always the position after the last
element returned:

* rebatch keeps the parent elements an interrupted ``next()`` read (with the parent's state before
  each) in ``_ahead`` and uses them again; its state is the committed one, which never counts them;
* zip keeps the elements it took from its first parents; ``get_state()`` gives them back
  (``unread``) when every parent can move back, else uses the parent states it noted before them;
* repeat starts the next epoch's iterator before committing, with one assignment, the new
  iterator, the epoch and the count, and closes the old iterator afterwards (or at the next call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grain_core import state as _state
from grain_core import transforms as tr
from grain_core import tree
from grain_core.dataset.base import IterDataset
from grain_core.dataset.batch_ops import _SnapshotIterator
from grain_core.dataset.chunking import can_unread, unread
from grain_core.dataset.iter_ops import _check_iter_parent
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.stages import OneParentIterator, OneParentIterDataset
from grain_core.state import StateField
from grain_core.validation import check_int

__all__ = ["RebatchIterDataset", "RepeatIterDataset", "ZipIterDataset"]


class RebatchIterDataset(OneParentIterDataset):
    """Re-cuts batched elements into batches of ``batch_size`` along the leading axis."""

    def __init__(self, parent: IterDataset, batch_size: int, drop_remainder: bool = False):
        super().__init__(parent)
        self._bs = tr.check_batch_size(batch_size)
        self._drop = bool(drop_remainder)

    def __iter__(self):
        return _RebatchIterator(iter(self._parent), self._bs, self._drop)


def _leading_dim(batch: Any) -> int:
    leaves = tree.flatten_with_paths(batch)
    if not leaves:
        raise ValueError("RebatchIterDataset: an element has no array leaves.")
    sizes = {len(leaf) for _, leaf in leaves}
    if len(sizes) != 1:
        raise ValueError(
            f"RebatchIterDataset: leaves of one element have different leading sizes {sorted(sizes)}."
        )
    return sizes.pop()


class _RebatchIterator(_SnapshotIterator):
    kind = "RebatchIterDataset"

    def __init__(self, parent, bs, drop):
        super().__init__(parent)
        self._bs, self._drop = bs, drop
        # Parent elements read by a next() that did not return (an interrupt), each with the
        # parent's state before it: used again, in order, by the next call.
        self._ahead: list[tuple[Any, Any]] = []

    def _expand(self, x):
        return [x, _leading_dim(x)]

    def position_fields(self):
        return {"batch_size": StateField.identity()}

    def position_state(self):
        return {"batch_size": self._bs}

    def restore_state(self, state):
        self._ahead = []
        super().restore_state(state)

    def __next__(self):
        """One batch, cut from the current parent element and the next ones. Works on local
        copies of the position; parent elements it reads go to ``_ahead`` (appended right after
        the parent returned them) and the position is committed in one assignment at the end.
        An interrupt anywhere leaves the committed position and ``_ahead``: the next call cuts
        the same batch again. An ``Exception`` consumes what was read (as Grain)."""
        parent, ahead = self._parent, self._ahead
        before, pending, taken = self._before, self._pending, self._taken
        used = 0  # elements of `ahead` this call has moved past
        pieces: list[Any] = []
        need = self._bs
        try:
            while need:
                if not pending or taken >= pending[1]:
                    if used < len(ahead):
                        b, x = ahead[used]
                    else:
                        b = parent.get_state()
                        try:
                            x = parent.__next__()
                        except StopIteration:
                            if not pieces or self._drop:
                                self._before, self._pending, self._taken, self._ahead = (
                                    before, pending, taken, []
                                )
                                raise
                            break
                        ahead.append((b, x))
                    used += 1
                    before, pending, taken = b, [x, _leading_dim(x)], 0
                    continue
                batch, size = pending
                take = min(need, size - taken)
                lo = taken
                pieces.append(tree.map_structure(lambda a, lo=lo, take=take: a[lo : lo + take], batch))
                taken += take
                need -= take
            out = pieces[0] if len(pieces) == 1 else tree.concatenate(pieces)
        except StopIteration:
            raise
        except Exception:
            self._before, self._pending, self._taken, self._ahead = before, pending, taken, ahead[used:]
            raise
        rest = ahead[used:]
        # The commit: one assignment, no call.
        self._before, self._pending, self._taken, self._ahead = before, pending, taken, rest
        return out


class ZipIterDataset(IterDataset):
    """Tuples of the next element of each parent.

    With ``strict=True`` (Grain's default) parents of different lengths raise ``ValueError`` when
    the shortest one ends, as Python's ``zip(strict=True)``; with ``strict=False`` the zip stops
    when any parent stops.
    """

    def __init__(self, parents: Sequence[IterDataset], *, strict: bool = True):
        parents = [_check_iter_parent(p, "ZipIterDataset") for p in parents]
        if not parents:
            raise ValueError("ZipIterDataset needs at least one dataset.")
        super().__init__(parents)
        self._strict = bool(strict)

    def __iter__(self):
        return _ZipIterator([iter(p) for p in self._parents], strict=self._strict)


def _zip_length_error(i: int, why: str) -> ValueError:
    """Grain's exact message (its tests match it literally); the remedy goes in a note."""
    others = "argument 1" if i == 1 else f"arguments 1-{i}"
    error = ValueError(f"ZipIterDataset argument {i + 1} is {why} than {others}")
    error.add_note("Pass strict=False to stop at the shortest input.")
    return error


class _ZipIterator(DatasetIterator):
    def __init__(self, parents: Sequence[DatasetIterator], *, strict: bool = False):
        super().__init__(parents)
        self._strict = strict
        # Every parent can move back: an interrupted call's elements are given back by get_state.
        # Otherwise the parent states before them are noted (one get_state per element of each
        # parent but the last).
        self._rewind = all(can_unread(p) for p in self._parents)
        # The elements an interrupted next() took from the first parents (used again by the next
        # call), and the states of those parents before them (when not _rewind; may be one longer).
        self._items: list[Any] = []
        self._befores: list[Any] = []

    def __next__(self):
        parents = self._parents
        last = len(parents) - 1
        items, befores = self._items, self._befores
        del befores[len(items) :]
        i = len(items)
        while i < last:
            p = parents[i]
            if not self._rewind:
                befores.append(p.get_state())
            try:
                x = p.__next__()
            except StopIteration:
                self._end(i)
                raise
            items.append(x)  # then nothing but a call's end: an interrupt there keeps it
            i += 1
        try:
            x = parents[last].__next__()
        except StopIteration:
            self._end(last)
            raise
        out = (*items, x)
        self._items, self._befores = [], []  # the commit
        return out

    def _end(self, i: int) -> None:
        """Parent ``i`` raised ``StopIteration``: with ``strict``, a ``ValueError`` unless every
        parent ends there."""
        if not self._strict:
            return
        if i > 0:
            raise _zip_length_error(i, "shorter") from None
        for j in range(1, len(self._parents)):
            try:
                next(self._parents[j])
            except StopIteration:
                continue
            raise _zip_length_error(j, "longer") from None

    def _give_back(self) -> None:
        """Gives the elements of an interrupted call back to their parents (last first); each
        parent moves, then the element is dropped, with nothing callable in between."""
        items = self._items
        while items:
            unread(self._parents[len(items) - 1], 1)
            del items[-1]

    def get_state(self):
        if self._items and self._rewind:
            self._give_back()
        items, befores = self._items, self._befores
        return _state.make_state(
            "ZipIterDataset",
            parents=[
                befores[i] if i < len(items) else p.get_state() for i, p in enumerate(self._parents)
            ],
        )

    def set_state(self, state):
        _state.expect_state(state, "ZipIterDataset", ("parents",))
        if len(state["parents"]) != len(self._parents):
            raise _state.StateMismatchError(
                f"zip state has {len(state['parents'])} parents, this pipeline has {len(self._parents)}."
            )
        if self._items and self._rewind:
            self._give_back()
        with _state.rollback_on_error(self):
            self._items, self._befores = [], []
            for p, s in zip(self._parents, state["parents"]):
                p.set_state(s)


class RepeatIterDataset(OneParentIterDataset):
    """The parent's elements ``num_epochs`` times (forever with ``None``), re-iterating the parent
    from its start for each epoch. An epoch that yields nothing ends the repetition (no busy loop)."""

    def __init__(self, parent: IterDataset, num_epochs: int | None = None):
        super().__init__(parent)
        self._epochs = None if num_epochs is None else check_int(
            num_epochs, "RepeatIterDataset: num_epochs", minimum=1
        )

    def __iter__(self):
        return _RepeatIterator(self._parent, self._epochs)


class _RepeatIterator(OneParentIterator):
    kind = "RepeatIterDataset"

    def __init__(self, parent_ds: IterDataset, epochs: int | None):
        super().__init__(iter(parent_ds))
        self._parent = self._parents[0]  # Grain's attribute, set: read per element
        self._parent_ds, self._limit, self._epoch, self._seen = parent_ds, epochs, 0, 0
        self._fresh: DatasetIterator | None = None  # the next epoch's iterator, being started
        self._retired: DatasetIterator | None = None  # the last epoch's, being closed

    def _close_retired(self) -> None:
        old = self._retired
        if old is not None:
            old.close()  # idempotent: an interrupt in it closes it again at the next call
            self._retired = None

    def _next_epoch(self) -> None:
        """Switches to a new iterator of the parent: started first (kept in ``_fresh``), then
        committed with one assignment, then the old one closed."""
        fresh = self._fresh
        if fresh is None:
            fresh = self._fresh = self._parent_ds.__iter__()  # stored as the call returns
        if self._options is not None:
            fresh.apply_options(self._options)
        old = self._parent
        self._parent, self._parents, self._epoch, self._seen, self._fresh, self._retired = (
            fresh, (fresh,), self._epoch + 1, 0, None, old
        )
        self._close_retired()

    def __next__(self):
        if self._retired is not None:
            self._close_retired()
        while True:
            if self._limit is not None and self._epoch >= self._limit:
                raise StopIteration
            try:
                x = self._parent.__next__()
            except StopIteration:
                if not self._seen:  # an empty epoch: every later one is empty too
                    self._epoch = self._limit if self._limit is not None else self._epoch
                    raise
                self._next_epoch()
                continue
            self._seen += 1
            return x

    def close(self) -> None:
        for it in (self._fresh, self._retired):
            if it is not None:
                it.close()
        self._fresh = self._retired = None
        super().close()

    def position_fields(self):
        return {"epoch": StateField.position(), "seen": StateField.position()}

    def position_state(self):
        return {"epoch": self._epoch, "seen": self._seen}

    def restore_position(self, state):
        self._epoch, self._seen = int(state["epoch"]), int(state["seen"])
