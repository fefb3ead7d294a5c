"""``InterleaveIterDataset``: round-robin over ``cycle_length`` open iterators of many datasets.

The order is Grain's: slots ``0 .. cycle_length-1`` take turns yielding one element each. A slot
with no iterator opens the next unopened dataset and reads from it in the same turn; a slot whose
iterator is exhausted is emptied and the turn passes on (the slot opens the next dataset when its
turn comes round again). Once every dataset is opened, empty slots are skipped, and iteration ends
when all slots are empty. With ``cycle_length=2`` over ``[range(3), range(10, 14)]`` the output is
``[0, 10, 1, 11, 2, 12, 13]``; over ``[range(2), range(10, 13), range(20, 21)]`` it is
``[0, 10, 1, 11, 12, 20]``.

Background work (off by default; neither changes the order nor the states):

* ``num_make_iter_threads > 0``: the next ``make_iter_buffer_size`` datasets' iterators are created
  ahead in that many threads (useful when opening a file is slow).
* ``iter_buffer_size > 0``: every open iterator is read ahead in its own thread into a buffer of
  that many elements, each stored with the iterator state after it, so checkpoints stay exact
  (the kernel's ``ReadAhead``, the one read-ahead thread prefetch uses too).
  Errors raised by a dataset are re-raised in the consumer.

Chunks: ``next_chunk(n)`` takes the round-robin's next ``n`` positions at once, asking each open
dataset once for all its elements among them (``next_chunk`` of its iterator, or what its reader
thread has ready) and returning the longest prefix every dataset delivered; what a dataset
delivered beyond it is given back. Opening, exhausting and reading datasets that cannot give
elements back go through the element path, so the order is Grain's either way.

Interrupts: a ``KeyboardInterrupt`` (or any exception raised into ``next()``) while the consumer
waits on a reader thread or an opening thread leaves the iterator as it was: every call first
computes what it returns without changing anything, then commits it in one assignment (a journal
entry applied at the start of the next call, by ``get_state`` and by ``close``), and elements are
removed from a reader's buffer only once a later call sees them committed. An interrupt after a
dataset's iterator returned elements but before the commit gives them back to it (or holds them,
with the state before them, for iterators that cannot move back). ``close()`` stops every thread,
waiting for each at most ``ReadAhead.JOIN_SECONDS``: a thread still inside a dataset's code then
closes what it holds itself when that code returns, so ``close()`` (and a ``set_state`` that
replaces open iterators, as a give-back after an interrupt does) never hangs. An iterator garbage
collected without ``close()`` is cleaned up by a ``weakref.finalize`` the same way.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import grain_core as grain
from grain_core.author import (
    InvalidStateError,
    ReadAhead,
    StateField,
    check_int,
    check_state_int,
    claim_worker_share,
    make_state,
    no_worker_share,
)
from grain_plugin_interleave.threads import _Openers, _Resources, _Slot

__all__ = ["InterleaveIterDataset"]

_ELEMENT, _END = ReadAhead.ELEMENT, ReadAhead.END

def _non_negative(value: Any, name: str, positive: bool = False) -> int:
    return check_int(value, f"InterleaveIterDataset: {name}", minimum=1 if positive else 0)


class InterleaveIterDataset(grain.IterDataset):
    """Interleaves the elements of ``datasets``, ``cycle_length`` of them open at a time.

    Args:
      datasets: a ``MapDataset`` whose elements are ``IterDataset``s (e.g.
        ``MapDataset.source(files).map(MyFileIterDataset)``) or a sequence of ``IterDataset``s.
        ``MapDataset`` items are read through ``to_iter_dataset()``.
      cycle_length: how many datasets are read from at a time, in turn.
      num_make_iter_threads: threads creating upcoming iterators ahead (0: none).
      make_iter_buffer_size: how many upcoming iterators are created ahead.
      iter_buffer_size: elements read ahead per open iterator in a background thread (0: none).
    """

    def __init__(
        self,
        datasets: grain.MapDataset | Sequence[grain.IterDataset],
        *,
        cycle_length: int,
        num_make_iter_threads: int = 0,
        make_iter_buffer_size: int = 1,
        iter_buffer_size: int = 0,
    ):
        if isinstance(datasets, grain.MapDataset):
            parents: Any = ()
            self._datasets: Any = datasets
            n = len(datasets)
            if n >= 2**62:
                raise ValueError("InterleaveIterDataset: datasets must be finite.")
        elif isinstance(datasets, grain.IterDataset) or not isinstance(datasets, Sequence):
            raise TypeError(
                "InterleaveIterDataset: datasets must be a MapDataset of IterDatasets or a "
                f"sequence of IterDatasets, got {type(datasets).__name__}."
            )
        else:
            datasets = list(datasets)
            for d in datasets:
                if not isinstance(d, (grain.IterDataset, grain.MapDataset)):
                    raise TypeError(
                        "InterleaveIterDataset: every dataset must be an IterDataset, got "
                        f"{type(d).__name__}."
                    )
            parents = datasets
            self._datasets = datasets
            n = len(datasets)
        super().__init__(parents)
        self._n = n
        self._cycle = _non_negative(cycle_length, "cycle_length", positive=True)
        self._make_threads = _non_negative(num_make_iter_threads, "num_make_iter_threads")
        self._make_buffer = _non_negative(make_iter_buffer_size, "make_iter_buffer_size")
        self._iter_buffer = _non_negative(iter_buffer_size, "iter_buffer_size")

    @property
    def _element_spec(self) -> Any:
        """The first dataset's element spec (Grain's rule: the interleaved datasets share one)."""
        if not self._n:
            raise NotImplementedError(
                "`element_spec` inference is not implemented for an InterleaveIterDataset of no "
                "datasets."
            )
        return grain.experimental.get_element_spec(self._datasets[0])

    def _open(self, index: int) -> grain.DatasetIterator:
        ds = self._datasets[index]
        if isinstance(ds, grain.MapDataset):
            ds = ds.to_iter_dataset()
        if not isinstance(ds, grain.IterDataset):
            raise TypeError(
                f"InterleaveIterDataset: dataset {index} is a {type(ds).__name__}, not an IterDataset."
            )
        with no_worker_share():  # each dataset is read whole by the worker that owns it
            return iter(ds)

    def _share(self, index: int, count: int) -> InterleaveIterDataset:
        """The same interleave over every ``count``-th dataset from ``index``."""
        datasets = self._datasets[index::count]
        return InterleaveIterDataset(
            datasets,
            cycle_length=self._cycle,
            num_make_iter_threads=self._make_threads,
            make_iter_buffer_size=self._make_buffer,
            iter_buffer_size=self._iter_buffer,
        )

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Grain's ``set_slice``: from now on interleave only ``datasets[sl]``."""
        del sequential_slice  # a slice of the datasets is read in full either way, as in Grain
        if not isinstance(sl, slice):
            raise TypeError(f"set_slice takes a slice, got {type(sl).__name__}.")
        self._datasets = self._datasets[sl]
        self._n = len(self._datasets)

    def __iter__(self):
        # In an mp_prefetch worker, read this worker's share of the datasets (as Grain does).
        share = claim_worker_share()
        return _InterleaveIterator(self if share is None else self._share(*share))

    def __str__(self) -> str:
        return f"InterleaveIterDataset(num_datasets={self._n}, cycle_length={self._cycle})"


_KEEP = object()  # in a journal: leave _last as it is


class _LastChunk:
    """What the latest ``next_chunk`` returned: ``n`` positions of the cycle from ``turn``, and per
    slot the slot object, the reader items taken (read-ahead) and the reader mark before them."""

    __slots__ = ("items", "marks", "n", "slots", "turn")

    def __init__(self, turn: int, n: int, slots: list, items: list, marks: list):
        self.turn, self.n, self.slots, self.items, self.marks = turn, n, slots, items, marks


class _InterleaveIterator(grain.DatasetIterator):
    kind = "InterleaveIterDataset"
    can_unread = True  # see unread

    def __init__(self, ds: InterleaveIterDataset):
        super().__init__()
        self._ds = ds
        self._res = _Resources(ds._cycle)
        self._next_ds = 0
        self._turn = 0
        # A committed call not yet applied: (turn after it, [(reader, mark)]); see _settle.
        # A committed call not yet applied: (turn after it, [(reader, mark)], [(iterator, count to
        # give back)], [(slot, element, state before it) to hold], new _last or _KEEP); see _settle.
        self._journal: tuple[int, list, list, list, Any] | None = None
        # An interrupted unbuffered next_chunk: (turn, slots, what each dataset returned), noted
        # with a plain store before its give-back journal is computed (see _note_abandoned).
        self._abandoned: tuple[int, list, list] | None = None
        self._last: tuple | _LastChunk | None = None
        # Stops reader threads and closes open iterators if this iterator is dropped unclosed.
        self._finalizer = weakref.finalize(self, self._res.close)

    @property
    def _slots(self) -> list[_Slot | None]:
        return self._res.slots

    def _settle(self) -> None:
        """Applies the journal of the latest call. Idempotent, so an interrupt here is harmless:
        marks and holds are plain assignments, and each give-back to a dataset's iterator is
        removed from the journal right after it returns (no call between the two)."""
        if self._abandoned is not None:
            self._note_abandoned()
        journal = self._journal
        if journal is None:
            return
        turn, marks, undo, holds, last = journal
        for reader, mark in marks:
            reader.mark = mark
        for slot, x, before in holds:
            slot.held_state = before
            slot.held = [x]
        while undo:
            it, count = undo[-1]
            it.unread(count)
            del undo[-1]
        if last is not _KEEP:
            self._last = last
        self._turn = turn
        self._journal = None

    # --- opening iterators, possibly ahead ---------------------------------------------------------

    def _prefetch_opens(self) -> None:
        ds, res = self._ds, self._res
        if not ds._make_threads:
            return
        if res.openers is None:
            res.openers = _Openers(ds._open, ds._make_threads)
        openers = res.openers
        openers.start()
        for i in range(self._next_ds, min(ds._n, self._next_ds + ds._make_buffer)):
            if not openers.has(i):
                openers.submit(i)

    def _new_slot(self, index: int, it: grain.DatasetIterator, state: Any = None) -> _Slot:
        """A slot reading ``it`` (moved to ``state`` if given); ``it`` is closed on failure."""
        slot = None
        try:
            if self.options is not None:
                it.apply_options(self.options)
            if state is not None:
                it.set_state(state)
            slot = _Slot(index, it)
            if self._ds._iter_buffer:
                slot.start_reader(self._ds._iter_buffer)
            return slot
        except BaseException:
            if slot is not None:
                slot.close()
            else:
                it.close()
            raise

    def _open_slot(self, turn: int) -> None:
        """Opens the next dataset into slot ``turn``. Interrupted, it changes nothing (an iterator
        opened ahead stays there; one opened here is closed)."""
        res, index = self._res, self._next_ds
        openers = res.openers
        ahead = openers is not None and openers.has(index)
        it = openers.take(index) if ahead else self._ds._open(index)  # type: ignore[union-attr]
        try:
            slot = self._new_slot(index, it)
        except BaseException:
            if ahead:
                openers.forget(index)  # type: ignore[union-attr]  # closed: open it again
            raise
        res.slots[turn] = slot  # the commit: two assignments, no call between them
        self._next_ds = index + 1
        if ahead:
            openers.forget(index)  # type: ignore[union-attr]
        self._prefetch_opens()

    def _retire(self, turn: int, slot: _Slot) -> None:
        """Takes the exhausted ``slot`` out of the cycle and passes the turn on."""
        res = self._res
        res.retired.append(slot)
        res.slots[turn] = None  # the commit: two assignments, no call between them
        self._turn = turn + 1 if turn + 1 < self._ds._cycle else 0
        res.close_retired()

    # --- iteration --------------------------------------------------------------------------------

    def __next__(self):
        self._settle()
        slots, cycle, n = self._res.slots, self._ds._cycle, self._ds._n
        while True:
            turn = self._turn
            slot = slots[turn]
            if slot is None:
                if self._next_ds < n:
                    self._open_slot(turn)
                    continue
                if all(s is None for s in slots):
                    raise StopIteration
                self._turn = turn + 1 if turn + 1 < cycle else 0
                continue
            after = turn + 1 if turn + 1 < cycle else 0
            reader = slot.reader
            if reader is not None:
                item = reader.peek(1, wait=True)[0]  # (seq, kind, value, state)
                kind = item[1]
                if kind is _END:
                    self._retire(turn, slot)
                    continue
                if kind is not _ELEMENT:  # an error, not consumed: every later call raises it
                    raise item[2]
                self._last = (turn, slot, None, reader.mark)
                self._journal = (after, [(reader, (item[0], item[3]))], [], [], _KEEP)
                return item[2]
            if slot.held:
                x = slot.held[0]
                self._last = (turn, slot, x, slot.held_state)
                slot.held = []  # the commit: two assignments, no call between them
                self._turn = after
                return x
            before = None if slot.can_unread else slot.it.get_state()
            try:
                x = slot.it.__next__()
            except StopIteration:
                self._retire(turn, slot)
                continue
            self._last = (turn, slot, x, before)
            self._turn = after  # the commit (the iterator moved by returning)
            return x

    def next_chunk(self, max_elements: int) -> list[Any]:
        self._settle()
        slots, cycle = self._res.slots, self._ds._cycle
        turn = self._turn
        if max_elements < 2 or any(s is None or s.held for s in slots):
            return [self.__next__()]
        buffered = self._ds._iter_buffer > 0
        if not buffered and not all(s.can_unread for s in slots):  # type: ignore[union-attr]
            return [self.__next__()]
        need = [0] * cycle
        for j in range(max_elements):
            need[(turn + j) % cycle] += 1
        got: list[list[Any]] = [[] for _ in range(cycle)]
        try:
            out = self._round_robin(slots, turn, need, got, max_elements, buffered)
        except BaseException:
            if not buffered:  # what the datasets returned goes back to them (a journal entry)
                self._abandoned = (turn, slots, got)  # first, a plain store (a second interrupt)
                self._note_abandoned()
            raise
        return out if out else [self.__next__()]

    def _note_abandoned(self) -> None:
        """Turns an interrupted read's note into its give-back journal (applied by ``_settle``),
        in one assignment after the last call, so a second interrupt leaves the note."""
        turn, slots, got = self._abandoned  # type: ignore[misc]
        journal = (turn, [], self._excess(slots, got, [0] * len(slots)), [], _KEEP)
        self._journal, self._abandoned = journal, None

    def _round_robin(
        self, slots: list, turn: int, need: list[int], got: list[list[Any]], max_elements: int,
        buffered: bool,
    ) -> list[Any]:
        """Reads ``need[k]`` elements from each slot ``k`` into ``got`` and returns the longest
        round-robin prefix from ``turn``, committing it (a journal entry, the last thing done);
        returns ``[]`` (committing only the give-backs) when the first slot has nothing ready."""
        cycle = len(slots)
        if buffered:
            for k in range(cycle):
                if need[k]:
                    ready = slots[k].reader.peek(need[k], wait=False)
                    got[k] = [item for item in ready if item[1] is _ELEMENT]
        else:
            for k in range(cycle):
                if need[k]:
                    try:
                        got[k] = slots[k].it.next_chunk(need[k])
                    except StopIteration:
                        got[k] = []
        taken = [0] * cycle
        out: list[Any] = []
        append = out.append
        j = 0
        while j < max_elements:
            k = (turn + j) % cycle
            i = taken[k]
            g = got[k]
            if i >= len(g):
                break
            append(g[i][2] if buffered else g[i])
            taken[k] = i + 1
            j += 1
        n = len(out)
        if buffered:
            if not n:
                return out
            items = [got[k][: taken[k]] for k in range(cycle)]
            marks = [s.reader.mark for s in slots]
            commits = [
                (slots[k].reader, (items[k][-1][0], items[k][-1][3]))
                for k in range(cycle)
                if taken[k]
            ]
            last: Any = _LastChunk(turn, n, list(slots), items, marks)
            self._journal = ((turn + n) % cycle, commits, [], [], last)  # the commit
        else:
            # The commit: the turn, and what the datasets returned beyond `out` goes back to them.
            undo = self._excess(slots, got, taken)
            last = _LastChunk(turn, n, list(slots), [None] * cycle, [None] * cycle) if n else _KEEP
            self._journal = ((turn + n) % cycle, [], undo, [], last)
        return out

    @staticmethod
    def _excess(slots: list, got: list, taken: list) -> list[tuple[Any, int]]:
        """``(iterator, count)`` give-backs of what each dataset returned beyond ``taken``."""
        return [
            (slots[k].it, len(g) - taken[k]) for k, g in enumerate(got) if len(g) > taken[k]
        ]

    def unread(self, count: int) -> None:
        """Moves back over the last ``count`` elements the latest call returned (the chunk
        protocol's give-back, used by chunked stages reading this one). Computes the move, then
        commits it as one journal entry (applied at once), so an interrupt leaves it all or nothing."""
        self._settle()
        last = self._last
        if count <= 0 or last is None:
            return
        if isinstance(last, tuple):  # one element, from slot ``slot``
            turn, slot, x, before = last
            if slot.reader is not None:
                journal = (turn, [(slot.reader, before)], [], [], None)
            elif slot.can_unread:
                journal = (turn, [], [(slot.it, 1)], [], None)
            else:
                journal = (turn, [], [], [(slot, x, before)], None)
            self._journal = journal  # the commit (the last thing: applied by the next call)
            return
        cycle = self._ds._cycle
        keep = last.n - count
        back = [0] * cycle
        for p in range(keep, last.n):
            back[(last.turn + p) % cycle] += 1
        marks, undo, items = [], [], list(last.items)
        for k, c in enumerate(back):
            if not c:
                continue
            slot = last.slots[k]
            if slot.reader is not None:
                taken = items[k]
                left = len(taken) - c
                mark = (taken[left - 1][0], taken[left - 1][3]) if left else last.marks[k]
                marks.append((slot.reader, mark))
                items[k] = taken[:left]
            else:
                undo.append((slot.it, c))
        new_last = _LastChunk(last.turn, keep, last.slots, items, last.marks)
        # The commit, and the last thing done here (no call after it): applied by the next call.
        self._journal = ((last.turn + keep) % cycle, marks, undo, [], new_last)

    def get_state(self):
        self._settle()
        return make_state(
            self.kind,
            num_datasets=self._ds._n,
            cycle_length=self._ds._cycle,
            next_dataset=self._next_ds,
            turn=self._turn,
            open=[
                None if s is None else {"dataset": s.index, "state": s.get_state()}
                for s in self._res.slots
            ],
        )

    def state_fields(self):
        ds = self._ds
        return {
            "num_datasets": StateField.identity(),
            "cycle_length": StateField.identity(),
            "next_dataset": StateField.position(0, ds._n),
            "turn": StateField.position(0, ds._cycle - 1),
            "open": StateField.opaque(nullable=False),
        }

    def check_state(self, state):
        super().check_state(state)
        ds = self._ds
        opened, next_ds = state["open"], state["next_dataset"]
        if not isinstance(opened, list) or len(opened) != ds._cycle:
            raise InvalidStateError(
                f"InterleaveIterDataset state has open={opened!r}, this pipeline has "
                f"cycle_length={ds._cycle} slots: the state was altered."
            )
        for slot, entry in enumerate(opened):
            if entry is None:
                continue
            if not isinstance(entry, dict) or "state" not in entry:
                raise InvalidStateError(
                    f"InterleaveIterDataset state slot {slot} is {entry!r}, not None or "
                    "{'dataset': index, 'state': ...}: the state was altered."
                )
            index = check_state_int(
                entry.get("dataset"), f"open[{slot}].dataset", where="InterleaveIterDataset"
            )
            if index >= next_ds:
                raise InvalidStateError(
                    f"InterleaveIterDataset state has dataset {index} open, but only datasets "
                    f"below next_dataset={next_ds} can be: the state was altered."
                )

    def restore_state(self, state):
        ds = self._ds
        opened = state["open"]
        next_ds, turn = state["next_dataset"], state["turn"]
        new: list[_Slot | None] = []
        try:
            for entry in opened:
                if entry is None:
                    new.append(None)
                    continue
                index = entry["dataset"]
                new.append(self._new_slot(index, ds._open(index), entry["state"]))
        except BaseException:
            for s in new:
                if s is not None:
                    s.close()
            raise
        res = self._res
        old = [s for s in res.slots if s is not None]
        res.slots[:] = new
        self._journal, self._last, self._abandoned = None, None, None
        self._next_ds = next_ds
        self._turn = turn
        res.retired.extend(old)
        res.close_retired()
        res.drop_pending()
        self._prefetch_opens()

    def _get_next_index(self) -> int:
        """As in Grain: with one dataset, its iterator's next index; else NotImplementedError."""
        slot = self._only_slot("get_next_index", open_it=False)
        return 0 if slot is None else grain.experimental.get_next_index(slot.it)

    def _set_next_index(self, index: int) -> None:
        slot = self._only_slot("set_next_index", open_it=True)
        assert slot is not None
        grain.experimental.set_next_index(slot.it, index)
        slot.held, slot.held_state = [], None
        self._last = None

    def _only_slot(self, what: str, open_it: bool) -> _Slot | None:
        if self._ds._n != 1:
            raise NotImplementedError(
                f"{what} is not supported for InterleaveDatasetIterator with more than one dataset."
            )
        self._settle()
        if open_it and self._res.slots[0] is None and self._next_ds == 0:
            self._open_slot(0)
        slot = self._res.slots[0]
        if slot is not None and slot.reader is not None:
            raise NotImplementedError(f"{what} is not supported with iter_buffer_size > 0.")
        return slot

    def start_prefetch(self) -> None:
        self._prefetch_opens()

    def apply_options(self, options):
        super().apply_options(options)
        for s in self._res.slots:
            if s is not None:
                s.it.apply_options(options)

    def close(self) -> None:
        """Stops every reader and opening thread and closes the open iterators. Idempotent."""
        self._settle()
        self._res.close()
