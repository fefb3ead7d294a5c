"""Combining datasets: concatenate, weighted mix (map and iter), selection maps."""

from __future__ import annotations

import bisect
import functools
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grain_core import state as _state
from grain_core import tree
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.chunking import CHUNK_BYTES, can_unread, give_back_inflight, mix_chunk
from grain_core.dataset.fast_next import list_serving_next
from grain_core.dataset.iterator import DatasetIterator
from grain_core.index_arrays import unique_ints
from grain_core.transforms import DatasetSelectionMap


def _check_datasets(datasets: Any, kind: type, where: str) -> list[Any]:
    if isinstance(datasets, (MapDataset, IterDataset)) or not isinstance(datasets, Sequence):
        raise TypeError(f"{where} expects a sequence of {kind.__name__}s, got {type(datasets).__name__}.")
    datasets = list(datasets)
    if not datasets:
        raise ValueError(f"{where} needs at least one dataset.")
    for i, d in enumerate(datasets):
        if not isinstance(d, kind):
            raise TypeError(f"{where}: dataset {i} is a {type(d).__name__}, expected a {kind.__name__}.")
    return datasets


def mix_proportions(weights: Sequence[float] | None, n: int, where: str) -> tuple[int, ...]:
    """Grain's integer proportions: ``(1,) * n`` without weights, else every weight scaled so the
    smallest is 100 and truncated to an int. A zero weight is refused, as in Grain."""
    if weights is None:
        return (1,) * n
    weights = list(weights)
    if len(weights) != n:
        raise ValueError(f"{where}: got {len(weights)} weights for {n} datasets.")
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where}: weights must be numbers, got {w!r}.")
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"{where}: weights must be finite and >= 0, got {weights}.")
    if 0 in weights:
        raise ValueError("Must specify all non-zero proportions for mixing.")
    scale = 100 / min(weights)
    return tuple(int(w * scale) for w in weights)


class MixSelection:
    """Which dataset, and which index in it, position ``k`` of a mix reads (Grain's rule).

    With integer ``proportions`` summing to ``T``, dataset ``d`` has been chosen
    ``floor(k * p_d / T)``-like many times before position ``k`` (computed exactly, dataset by
    dataset, as Grain's ``_dataset_and_key_of_next_element`` does); position ``k`` reads the
    dataset whose count grows between ``k`` and ``k + 1``.
    """

    def __init__(self, proportions: Sequence[int]):
        self.proportions = tuple(int(p) for p in proportions)
        self.total = sum(self.proportions)

    @functools.cached_property
    def order(self) -> list[int]:
        """The dataset of each position of one period: the selection repeats every ``total``
        positions (each dataset ``d`` is chosen ``p_d`` times per period)."""
        return self.locate_many(np.arange(self.total, dtype=np.int64))[0].tolist()

    def locate(self, k: int) -> tuple[int, int]:
        """Returns ``(dataset, index within it)`` of mixed position ``k``."""
        remaining = self.total
        cur, cur1 = k, k + 1
        for d, p in enumerate(self.proportions):
            nxt = (cur * (remaining - p)) // remaining
            nxt1 = (cur1 * (remaining - p)) // remaining
            count1 = cur1 - nxt1
            if cur - nxt != count1:
                return d, count1 - 1
            remaining -= p
            cur, cur1 = nxt, nxt1
        raise AssertionError("unreachable: the last dataset always takes the position")

    def locate_many(self, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`locate` over an int64 array: ``(datasets, indices within them)``."""
        ks = np.asarray(ks, dtype=np.int64)
        if ks.size and (int(ks.max()) + 1) * self.total >= 2**62:  # beyond int64: Python ints
            pairs = [self.locate(int(k)) for k in ks.tolist()]
            return (
                np.asarray([d for d, _ in pairs], dtype=np.int64),
                np.asarray([j for _, j in pairs], dtype=np.int64),
            )
        datasets = np.full(ks.shape, -1, dtype=np.int64)
        within = np.zeros(ks.shape, dtype=np.int64)
        open_ = np.ones(ks.shape, dtype=bool)
        remaining = self.total
        cur, cur1 = ks, ks + 1
        for d, p in enumerate(self.proportions):
            nxt = (cur * (remaining - p)) // remaining
            nxt1 = (cur1 * (remaining - p)) // remaining
            count1 = cur1 - nxt1
            hit = open_ & ((cur - nxt) != count1)
            datasets[hit] = d
            within[hit] = count1[hit] - 1
            open_ &= ~hit
            remaining -= p
            cur, cur1 = nxt, nxt1
        return datasets, within


class MixedMapDataset(MapDataset):
    """Datasets interleaved by weight in Grain's order (:class:`MixSelection`); one epoch ends when
    the shortest input's share runs out: ``int(min(len(d) / (p_d / sum(p))))``."""

    def __init__(self, datasets: Sequence[MapDataset], weights: Sequence[float] | None = None):
        datasets = _check_datasets(datasets, MapDataset, "MapDataset.mix")
        super().__init__(datasets)
        proportions = mix_proportions(weights, len(datasets), "MapDataset.mix")
        self._pattern = MixSelection(proportions)
        total = sum(proportions)
        lengths = [len(d) / (p / total) for d, p in zip(datasets, proportions)]
        empty = [f"index {i} ({d})" for i, (d, n) in enumerate(zip(datasets, lengths)) if n == 0]
        if empty:
            raise ValueError(
                "All datasets must have positive length for mixing, but dataset(s) at "
                f"{', '.join(empty)} have length 0."
            )
        self._len = min(sys.maxsize, int(min(lengths)))

    def __len__(self):
        return self._len

    def fingerprint_fields(self):
        return {"proportions": list(self._pattern.proportions)}

    def element_at(self, index):
        d, j = self._pattern.locate(index)
        return self._parents[d].element_at(j)

    def __getitems__(self, indices):
        ks = np.asarray(indices, dtype=np.int64)
        if ks.size == 0:
            return []
        if int(ks.max()) >= 2**62:  # beyond int64 arithmetic: one at a time with Python ints
            return [self.element_at(int(k)) for k in indices]
        datasets, within = self._pattern.locate_many(ks)
        out: list[Any] = [None] * ks.size
        for d in unique_ints(datasets).tolist():
            positions = np.flatnonzero(datasets == d)
            items = self._parents[d].__getitems__(within[positions])
            for p, x in zip(positions.tolist(), items):
                out[p] = x
        return out


class ConcatenateMapDataset(MapDataset):
    """The inputs one after another; epoch ``e`` reads epoch ``e`` of each input."""

    def __init__(self, datasets: Sequence[MapDataset]):
        datasets = _check_datasets(datasets, MapDataset, "MapDataset.concatenate")
        for i, d in enumerate(datasets):
            if len(d) >= sys.maxsize:
                raise ValueError(
                    f"Cannot concatenate infinite datasets. {d} is infinite (dataset {i} of "
                    "MapDataset.concatenate); concatenate before repeat()."
                )
        super().__init__(datasets)
        self._lens = [len(d) for d in datasets]
        self._starts = [0]
        for n in self._lens:
            self._starts.append(self._starts[-1] + n)
        self._len = self._starts[-1]

    def __len__(self):
        return self._len

    def element_at(self, index):
        if self._len == 0:
            raise IndexError("Cannot read from an empty concatenation.")
        epoch, j = divmod(index, self._len)
        d = bisect.bisect_right(self._starts, j) - 1
        return self._parents[d].element_at(epoch * self._lens[d] + j - self._starts[d])


class SelectionMapDataset(MapDataset):
    """Element ``i`` is ``datasets[d][j]`` where ``(d, j) = selection_map[i % len(selection_map)]``."""

    def __init__(self, datasets: Sequence[MapDataset], selection_map: DatasetSelectionMap):
        datasets = _check_datasets(datasets, MapDataset, "MapDataset.select_from_datasets")
        if not (hasattr(selection_map, "__len__") and hasattr(selection_map, "__getitem__")):
            raise TypeError("select_from_datasets expects a DatasetSelectionMap (with __len__ and __getitem__).")
        super().__init__(datasets)
        self._map = selection_map
        self._len = len(selection_map)

    def __len__(self):
        return self._len

    def element_at(self, index):
        if self._len == 0:
            raise IndexError("Cannot read from an empty selection map (length 0).")
        d, j = self._map[index % self._len]
        if not 0 <= d < len(self._parents):
            raise IndexError(f"selection map chose dataset {d}, but there are {len(self._parents)}.")
        return self._parents[d].element_at(j)


class MixedIterDataset(IterDataset):
    """Iterators interleaved by weight in Grain's order; stops as soon as any input is exhausted.

    A ``MapDataset`` among the inputs is read through ``to_iter_dataset()`` (Grain iterates it).

    Named inputs (a dict) are ordered by sorted key, as Grain's tree flattening does; restoring a
    state of a named mix restores the components it names and leaves the others where they are.
    """

    def __init__(self, datasets: Any, weights: Any = None):
        if isinstance(datasets, Mapping):
            try:
                keys = sorted(datasets)
            except TypeError:  # keys of mixed types: their distinct-as-strings check follows
                keys = sorted(datasets, key=str)
            datasets = {k: datasets[k] for k in keys}
            names = [str(k) for k in datasets]
            if len(set(names)) != len(names):
                raise ValueError(
                    "IterDataset.mix: component names must be distinct as strings (they key the "
                    f"iterator state), got {list(datasets)}."
                )
            if weights is not None:
                if not isinstance(weights, Mapping) or set(map(str, weights)) != set(names):
                    raise ValueError(
                        "IterDataset.mix: with named datasets, weights must be a dict with the same "
                        f"names {sorted(names)}."
                    )
                weights = [weights[k] for k in datasets]
            datasets = list(datasets.values())
        else:
            names = None
            if isinstance(weights, Mapping):
                raise TypeError("IterDataset.mix: weights is a dict but datasets is not.")
        if isinstance(datasets, Sequence) and not isinstance(datasets, (MapDataset, IterDataset)):
            # As in Grain, a MapDataset input is read as its iterator: to_iter_dataset().
            datasets = [d.to_iter_dataset() if isinstance(d, MapDataset) else d for d in datasets]
        datasets = _check_datasets(datasets, IterDataset, "IterDataset.mix")
        super().__init__(datasets)
        self._names = names or [str(i) for i in range(len(datasets))]
        self._named = names is not None
        self._pattern = MixSelection(mix_proportions(weights, len(datasets), "IterDataset.mix"))

    def __iter__(self):
        return _MixedIterator(self)


# Positions one next() reads from the parents at most (then served one by one), and about
# CHUNK_BYTES: each read costs a call per parent (and a give-back of what a parent read past the
# shortest one), spread over more elements (1,024 -> 4,096: ~10% less CPU an element, measured on
# the bench's mix of two maps).
_MAX_READ = 4096


class _MixedIterator(DatasetIterator):
    """Reads its parents a chunk of positions at a time (:func:`mix_chunk`) where they can move
    back, and serves ``next()`` from that chunk; ``get_state`` first moves the parents back over
    the elements read but not returned, so the state is always the position after the last
    element returned. Reads by ``next()`` grow 1, 2, 4, ... up to ``_MAX_READ`` positions and about
    ``CHUNK_BYTES`` (measured on the latest read's first element) after a start or restore;
    ``next_chunk(n)`` reads ``n`` positions when nothing read is left.

    Interrupts: what a read took from each parent is noted in ``_inflight`` until the read is
    committed (one assignment, which also empties it); every call first gives back what an
    interrupted read left there, so a second interrupt during the first's give-back loses
    nothing either (:func:`~grain_core.dataset.chunking.give_back_inflight`)."""

    def __init__(self, ds: MixedIterDataset):
        super().__init__([iter(p) for p in ds.parents])
        self._ds = ds
        self._order = ds._pattern.order  # the dataset of each position of one period
        self._period = len(self._order)
        self._pos = 0  # the parents' position: after the elements read
        self._read: list[Any] = []  # the latest chunk read; the first self._served were returned
        self._served = 0
        self._step = 1  # positions the next read by next() covers
        self._elem_bytes = 0  # bytes of an element, as last measured (0: unknown)
        # An Exception a parent raised for a position after self._read: (position, error).
        self._error: tuple[int, Exception] | None = None
        self._done = False
        self._inflight: dict[int, Any] = {}  # parent -> what an uncommitted read took from it
        self._chunked = all(can_unread(p) for p in self._parents)
        self.can_unread = self._chunked  # chunks only from parents that can

    def _next_unguarded(self):
        i = self._served
        try:
            x = self._read[i]
        except IndexError:
            return self._next_slow()
        self._served = i + 1
        return x

    # An element of the latest chunk before the guard (fast_next.list_serving_next; ``_inflight``
    # is non-empty only after an interrupted read or give-back, which both leave the chunk all
    # served).
    __next__ = list_serving_next("_read", "_served", _next_unguarded)

    def _next_slow(self):
        """``next()`` once the latest chunk is all served: gives back what an interrupted read
        left noted, then reads the next chunk (or one element, from parents that cannot move
        back)."""
        if self._inflight:
            give_back_inflight(self._parents, self._inflight)
        if not self._chunked:
            return self._next_one()
        step = self._step
        if step < _MAX_READ:
            self._step = 2 * step
        if self._elem_bytes:
            step = min(step, max(1, CHUNK_BYTES // self._elem_bytes))
        out = self._read_more(step)
        if len(out) > 1:  # (before the commit below: an interrupt here loses nothing)
            self._elem_bytes = tree.nbytes(out[0])
        self._served = 1
        return out[0]

    def _next_one(self):
        """One element, read from its parent alone (parents that cannot move back)."""
        if self._done:
            raise StopIteration
        pos = self._pos
        d = self._order[pos % self._period]
        try:
            x = self._parents[d].__next__()
        except StopIteration:
            self._pos, self._done = pos + 1, True
            raise
        except Exception:  # the parent consumed that position's element (as next() does)
            self._pos = pos + 1
            raise
        self._pos = pos + 1  # after the parent returned: an interrupt in it moves nothing
        return x

    def _read_more(self, n: int) -> list[Any]:
        """Reads up to ``n`` positions into ``self._read`` (served from its start), or raises the
        error or end found at the next position (which that consumes, as ``next()`` does)."""
        error = self._error
        if error is not None and error[0] == self._pos:
            self._error = None
            self._pos += 1
            self._read, self._served = [], 0
            raise error[1]
        if self._done:
            raise StopIteration
        if error is not None:
            n = min(n, error[0] - self._pos)
        pos = self._pos
        got = mix_chunk(self._parents, self._order, pos, n, self._inflight)
        out, k, err = got.elements, got.count, got.error
        if not k:
            self._read, self._served, self._pos, self._inflight = [], 0, pos + 1, {}
            if err is not None:
                raise err
            self._done = True
            raise StopIteration
        if err is not None:
            self._error = (pos + k, err)
        # The commit: one assignment, no call (an interrupt before it: _inflight gives back).
        self._read, self._served, self._pos, self._inflight = out, 0, pos + k, {}
        return out

    def next_chunk(self, max_elements: int) -> list[Any]:
        if not self._chunked:
            return [self.__next__()]
        if self._inflight:
            give_back_inflight(self._parents, self._inflight)
        i = self._served
        read = self._read
        if i < len(read):
            out = read[i : i + max_elements]
            self._served = i + len(out)
        else:
            out = self._read_more(max_elements)
            self._served = len(out)
        return out

    def unread(self, count: int) -> None:
        self._served -= count  # what the latest call returned is still in self._read

    def _give_back(self) -> None:
        """Moves the parents back over the elements read but not returned; reads by ``next()``
        grow from one position again."""
        if self._inflight:
            give_back_inflight(self._parents, self._inflight)
        served, pos = self._served, self._pos
        left = len(self._read) - served
        if left:
            back: dict[int, Any] = {}
            for p in range(pos - left, pos):
                d = self._order[p % self._period]
                back[d] = back.get(d, 0) + 1
            # Noted, then given back parent by parent (an interrupt: the rest at the next call).
            self._read, self._pos, self._step, self._inflight = (
                self._read[:served], pos - left, 1, back
            )
            give_back_inflight(self._parents, back)

    def get_state(self):
        self._give_back()
        return _state.make_state(
            "MixedIterDataset",
            proportions=list(self._ds._pattern.proportions),
            position=self._pos,
            exhausted=self._done,
            parents={n: it.get_state() for n, it in zip(self._ds._names, self._parents)},
        )

    def set_state(self, state):
        _state.expect_state(state, "MixedIterDataset", ("position", "parents"))
        if not isinstance(state["parents"], Mapping):
            raise _state.StateMismatchError("IterDataset.mix state: 'parents' is not a dict.")
        names, saved = set(self._ds._names), set(state["parents"])
        if names != saved and not self._ds._named:
            added, removed = sorted(names - saved), sorted(saved - names)
            raise _state.StateMismatchError(
                "IterDataset.mix state was saved by a mix of other components: "
                + "; ".join(
                    part
                    for part in (
                        f"component(s) {added} were added since" if added else "",
                        f"component(s) {removed} were removed since" if removed else "",
                    )
                    if part
                )
                + ". Restore it into a mix of the same named datasets."
            )
        if not self._ds._named:
            _state.expect_state(
                state, "MixedIterDataset", proportions=list(self._ds._pattern.proportions)
            )
        if self._inflight:
            give_back_inflight(self._parents, self._inflight)
        with _state.rollback_on_error(self):
            for n, it in zip(self._ds._names, self._parents):
                if n in state["parents"]:
                    it.set_state(state["parents"][n])
            self._pos = int(state["position"])
            self._done = bool(state.get("exhausted", False))
            self._read, self._served, self._step, self._error = [], 0, 1, None
