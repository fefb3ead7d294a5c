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
* ``iter_buffer_size > 0``: every open iterator is read ahead in its own thread into a queue of that
  many elements, each stored with the iterator state after it, so checkpoints stay exact. Errors
  raised by a dataset are re-raised in the consumer.

``close()`` stops every thread; an iterator garbage collected without ``close()`` is cleaned up by a
``weakref.finalize`` the same way.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import grain_core as grain
from grain_core import state as _state
from grain_core.dataset.sharing import claim_worker_share, no_worker_share
from grain_core.state import StateField
from grain_core.validation import check_int

__all__ = ["InterleaveIterDataset"]



class _End:
    """Queued by a reader thread when its iterator is exhausted."""


class _Failed:
    """Queued by a reader thread when its iterator raised; the consumer re-raises ``error``."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


_END = _End()


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


class _Reader:
    """Reads an iterator ahead in a thread, queueing ``(element, state after it)`` pairs.

    The end of the iterator and errors are queued as ``_End`` / ``_Failed`` objects, which no
    element can be mistaken for. ``stop()`` ends the thread and joins it.
    """

    def __init__(self, it: grain.DatasetIterator, size: int):
        self._it = it
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="interleave-reader")
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        it = self._it
        try:
            while not self._stop.is_set():
                try:
                    x = next(it)
                except StopIteration:
                    self._put(_END)
                    return
                if not self._put((x, it.get_state())):
                    return
        except BaseException as e:  # re-raised in the consumer
            self._put(_Failed(e))

    def get(self) -> tuple[Any, Any]:
        item = self._queue.get()
        if isinstance(item, _End):
            self._queue.put(_END)
            raise StopIteration
        if isinstance(item, _Failed):
            raise item.error
        return item

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class _Slot:
    """One open dataset: its index, iterator and (with read-ahead) the state after what was taken."""

    __slots__ = ("index", "it", "reader", "state")

    def __init__(self, index: int, it: grain.DatasetIterator):
        self.index = index
        self.it = it
        self.reader: _Reader | None = None
        self.state: Any = None

    def next(self, buffer: int) -> Any:
        if not buffer:
            return next(self.it)
        if self.reader is None:
            self.state = self.it.get_state()
            self.reader = _Reader(self.it, buffer)
        x, self.state = self.reader.get()
        return x

    def get_state(self) -> Any:
        return self.it.get_state() if self.reader is None else self.state

    def close(self) -> None:
        if self.reader is not None:
            self.reader.stop()
            self.reader = None
        self.it.close()


class _Resources:
    """What an interleave iterator holds open: its slots, iterators opened ahead and the thread pool.

    Kept apart from the iterator so that a ``weakref.finalize`` can release them (stop reader
    threads, close iterators, shut the pool down) when the iterator is garbage collected unclosed.
    """

    def __init__(self, cycle: int):
        self.slots: list[_Slot | None] = [None] * cycle
        self.pending: dict[int, Future] = {}
        self.pool: ThreadPoolExecutor | None = None

    def drop_pending(self) -> None:
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            try:
                fut.result().close()
            except Exception:
                pass

    def close(self) -> None:
        for i, s in enumerate(self.slots):
            if s is not None:
                self.slots[i] = None
                s.close()
        self.drop_pending()
        if self.pool is not None:
            pool, self.pool = self.pool, None
            pool.shutdown(wait=True)


class _InterleaveIterator(grain.DatasetIterator):
    kind = "InterleaveIterDataset"

    def __init__(self, ds: InterleaveIterDataset):
        super().__init__()
        self._ds = ds
        self._res = _Resources(ds._cycle)
        self._next_ds = 0
        self._turn = 0
        # Stops reader threads and closes open iterators if this iterator is dropped unclosed.
        self._finalizer = weakref.finalize(self, self._res.close)

    @property
    def _slots(self) -> list[_Slot | None]:
        return self._res.slots

    # --- opening iterators, possibly ahead ---------------------------------------------------------

    def _prefetch_opens(self) -> None:
        ds, res = self._ds, self._res
        if not ds._make_threads:
            return
        if res.pool is None:
            res.pool = ThreadPoolExecutor(ds._make_threads, thread_name_prefix="interleave-open")
        for i in range(self._next_ds, min(ds._n, self._next_ds + ds._make_buffer)):
            if i not in res.pending:
                res.pending[i] = res.pool.submit(ds._open, i)

    def _open(self, index: int) -> grain.DatasetIterator:
        fut = self._res.pending.pop(index, None)
        it = fut.result() if fut is not None else self._ds._open(index)
        if self.options is not None:
            it.apply_options(self.options)
        return it

    # --- iteration --------------------------------------------------------------------------------

    def __next__(self):
        slots, cycle, n = self._res.slots, self._ds._cycle, self._ds._n
        buffer = self._ds._iter_buffer
        while True:
            turn = self._turn
            slot = slots[turn]
            if slot is not None:
                try:
                    x = slot.next(buffer)
                except StopIteration:
                    # As in Grain: the slot is emptied and the turn passes on; the slot opens the
                    # next dataset only when its turn comes round again.
                    slots[turn] = None
                    slot.close()
                    self._turn = turn + 1 if turn + 1 < cycle else 0
                    continue
                self._turn = turn + 1 if turn + 1 < cycle else 0
                return x
            if self._next_ds < n:
                index = self._next_ds
                self._next_ds = index + 1
                slots[turn] = _Slot(index, self._open(index))
                self._prefetch_opens()
                continue
            if all(s is None for s in slots):
                raise StopIteration
            self._turn = turn + 1 if turn + 1 < cycle else 0

    def get_state(self):
        return _state.make_state(
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
            raise _state.InvalidStateError(
                f"InterleaveIterDataset state has open={opened!r}, this pipeline has "
                f"cycle_length={ds._cycle} slots: the state was altered."
            )
        for slot, entry in enumerate(opened):
            if entry is None:
                continue
            if not isinstance(entry, dict) or "state" not in entry:
                raise _state.InvalidStateError(
                    f"InterleaveIterDataset state slot {slot} is {entry!r}, not None or "
                    "{'dataset': index, 'state': ...}: the state was altered."
                )
            index = _state.check_state_int(
                entry.get("dataset"), f"open[{slot}].dataset", where="InterleaveIterDataset"
            )
            if index >= next_ds:
                raise _state.InvalidStateError(
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
                it = ds._open(index)
                if self.options is not None:
                    it.apply_options(self.options)
                new.append(_Slot(index, it))
                it.set_state(entry["state"])
        except BaseException:
            for s in new:
                if s is not None:
                    s.close()
            raise
        res = self._res
        for s in res.slots:
            if s is not None:
                s.close()
        res.drop_pending()
        res.slots[:] = new
        self._next_ds = next_ds
        self._turn = turn
        self._prefetch_opens()

    def start_prefetch(self) -> None:
        self._prefetch_opens()

    def apply_options(self, options):
        super().apply_options(options)
        for s in self._res.slots:
            if s is not None:
                s.it.apply_options(options)

    def close(self) -> None:
        """Stops every reader thread, closes the open iterators and the opening pool. Idempotent."""
        self._res.close()
