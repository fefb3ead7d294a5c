"""``IterDataset.filter``: the filter stage, its chunked iterator and the filter-ratio check's use."""

from __future__ import annotations

import itertools
import time
from typing import Any

from grain_core import state as _state
from grain_core import transforms as tr
from grain_core import tree
from grain_core.dataset.base import IterDataset
from grain_core.dataset.callables import as_callable
from grain_core.dataset.chunking import CHUNK_BYTES, can_unread, unread
from grain_core.dataset.filter_ratio import FilterRatioCheck
from grain_core.dataset.iter_ops import _error_note, _Raise, _stage_name
from grain_core.dataset.stages import OneParentIterator, OneParentIterDataset


class FilterIterDataset(OneParentIterDataset):
    """Only the elements for which ``transform(element)`` is true."""

    def __init__(self, parent: IterDataset, transform: Any):
        super().__init__(parent)
        self._transform = transform
        self._fn = as_callable(transform, tr.Filter, "filter()")

    def __iter__(self):
        # Grain's name for the stage in the filter-ratio warning and error.
        name = f"FilterDatasetIterator(transform={tr.transform_name(self._transform)})"
        return _FilterIterator(iter(self._parent), self._fn, name)

    def __str__(self):
        return f"FilterIterDataset({tr.transform_name(self._transform)})"


class _FilterIterator(OneParentIterator):
    """Keeps the elements ``fn`` accepts, testing whole chunks where the parent can move back.

    **Read-ahead kept inside.** Where the parent can move back (:func:`can_unread`), the filter
    reads a parent chunk, tests it, and keeps the accepted elements it has not returned yet (the
    *surplus*) in itself: ``next()`` and ``next_chunk(n)`` serve from that surplus and read the next
    parent chunk only when it is used up (a ``next_chunk`` call never returns elements of two parent
    chunks, so it may return fewer than asked at a chunk's end). ``get_state()`` first gives the
    parent back (``unread``) the elements read after the last one returned, remembering their
    verdicts (and the error of a failing one) so that no element is tested twice: the state is
    always the position after the last element returned, as with element-wise reading.

    **How far ahead.** Reads aim at 1, 2, 4, ... accepted elements up to ``_MAX_AHEAD``, about
    ``CHUNK_BYTES`` bytes (measured on accepted elements) and at most ``_MAX_ASK`` parent
    elements, growing only while a read takes under ``_GROW_SECONDS`` (a costly map or test keeps
    its reads near that long: no long wait for one element); a ``next_chunk(n)`` read covers at
    least ``n`` accepted elements (as estimated from the fraction accepted so far). ``get_state()`` restarts the growth at the number of elements
    returned since the previous state, so states taken every ``k`` elements (``thread_prefetch``
    and ``device_put`` take one after each element) give back little; at 1 (and after a start or
    restore) ``next()`` reads the parent one element at a time, with nothing to give back.

    **Errors and interrupts.** An ``Exception`` from ``fn`` consumes the failing element (as
    ``next()`` does in Grain): the accepted elements before it are served first, then it is
    raised, at the element where element-wise reading raises it; the parent elements after it
    are given back. A ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``)
    gives the whole chunk back (with the verdicts computed so far): nothing is lost, and the next
    read is small, so a retry soon gets through even under repeated interrupts. A parent that
    cannot move back is read one element at a time (an interrupted element is held, with the
    parent's state before it, until it is tested)."""

    kind = "FilterIterDataset"
    _MAX_ASK = 8192  # parent elements one read asks for at most
    _MAX_AHEAD = 2048  # accepted elements one read aims at, at most (unless more are asked for)
    _GROW_SECONDS = 0.02  # ... growing only while a read takes less than this

    def __init__(self, parent, fn, name="filter()"):
        super().__init__(parent)
        self._parent = parent  # Grain's attribute, set: read per element
        self._fn = fn
        self._check = FilterRatioCheck(name)
        self._tested = 0  # parent elements read and not given back (for error messages)
        self._kept_total = 0
        self._seen_total = 0
        self._chunked = self.can_unread = can_unread(parent)
        # The latest parent chunk (what the parent's latest call returned and was not given back):
        # the verdicts of its elements, the accepted ones (the first `_served` of them returned)
        # and, if its last element failed, that element's error (raised once `_kept` is served).
        self._verdicts: list[Any] = []
        self._kept: list[Any] = []
        self._served = 0
        self._error: Exception | None = None
        self._replay: list[Any] = []  # verdicts of the next parent elements (given back before)
        self._step = 1  # accepted elements the next read aims at (doubling up to _MAX_AHEAD)
        self._since = 0  # elements returned since the latest get_state(), less self._served
        self._elem_bytes = 0  # bytes of an accepted element, as last measured
        # A parent that cannot move back: the element whose test was interrupted and the
        # parent's state before it (see _ChunkedOneToOne).
        self._held: tuple[Any, Any] | None = None
        # After an interrupt while testing a chunk: what still goes back (see _settle).
        self._owed: tuple[list[Any], list[Any], list[Any]] | None = None

    # --- serving ------------------------------------------------------------------------------

    def __next__(self):
        if not self._chunked:
            return self._next_one()
        s = self._served
        kept = self._kept
        if s < len(kept):
            self._served = s + 1
            return kept[s]
        if self._step == 1 and self._error is None:
            return self._next_direct()
        return self._read(1)[0]

    def next_chunk(self, max_elements: int) -> list[Any]:
        if not self._chunked:
            return [self._next_one()]
        s = self._served
        kept = self._kept
        if s < len(kept):
            out = kept[s : s + max_elements]
            self._served = s + len(out)
            return out
        return self._read(max_elements)

    def unread(self, count: int) -> None:
        """Moves back over the last ``count`` elements returned: they are all in ``_kept``."""
        if count > 0:
            self._served -= count

    # --- reading ------------------------------------------------------------------------------

    def _ask(self, want: int) -> int:
        """Parent elements to read for ``want`` accepted ones, as estimated so far."""
        if not self._seen_total:
            return want
        if not self._kept_total:
            return self._MAX_ASK
        return min(self._MAX_ASK, -(-want * self._seen_total // self._kept_total) + 1)

    def _read(self, n: int) -> list[Any]:
        """With ``_kept`` served: raises the latest chunk's error, if any, or reads parent chunks
        until one has accepted elements, makes it the latest chunk and returns its first ``n``."""
        if self._owed is not None:
            self._settle()
        if self._error is not None:
            e = self._error
            self._verdicts, self._kept, self._served, self._error = [], [], 0, None
            raise e
        self._since += self._served
        step = self._step
        if step < self._MAX_AHEAD:
            self._step = 2 * step
        began = time.perf_counter()
        if self._elem_bytes:
            step = min(step, max(1, CHUNK_BYTES // self._elem_bytes))
        want = max(n, step)
        parent, fn = self._parent, self._fn
        while True:
            ask = self._ask(want)
            # The previous chunk is consumed to its end (plain assignments, then the call).
            self._verdicts, self._kept, self._served = [], [], 0
            try:
                chunk = parent.next_chunk(ask)
            except BaseException as e:
                if not isinstance(e, Exception):  # interrupted: read little when called again
                    self._step = 1
                raise
            replay = self._replay
            verdicts: list[Any] = []
            # Nothing between the parent's return and `try` can be interrupted (a Python call
            # returns without checking for signals); after `try`, nothing before the commit
            # calls anything (a call to a builtin checks for signals when it returns).
            try:
                if replay:
                    _replayed_verdicts(chunk, replay, fn, verdicts)
                else:
                    # C-level loop; on an exception `verdicts` holds the verdicts before it.
                    verdicts.extend(map(fn, chunk))
                kept = list(itertools.compress(chunk, verdicts))
                size = len(chunk)
            except Exception as e:
                return self._failed(chunk, verdicts, replay, e, n)
            except BaseException as e:
                self._owed = (chunk, verdicts, replay)  # first, a plain store
                self._settle()
                _error_note(e, _stage_name(self.kind, fn), self._tested + len(verdicts))
                raise
            # The commit: plain assignments.
            self._replay = replay[size:] if replay else replay
            self._tested += size
            if not kept:
                self._count_fresh(verdicts, len(replay), 0)
                continue
            self._verdicts, self._kept = verdicts, kept
            if time.perf_counter() - began >= self._GROW_SECONDS and self._step > step:
                self._step = step  # slow reads stop growing
            self._count_fresh(verdicts, len(replay), len(kept))  # may raise: _kept stays
            self._elem_bytes = tree.nbytes(kept[0])
            out = kept[:n]
            self._served = len(out)
            return out

    def _next_direct(self):
        """``next()`` reading the parent one element at a time, without reading ahead: after a
        start or restore, and while states are taken after every element (where a surplus would
        only be given back each time). The next read reads ahead (two elements)."""
        if self._owed is not None:
            self._settle()
        fn, parent = self._fn, self._parent
        self._since += self._served
        self._verdicts, self._kept, self._served = [], [], 0
        self._step = 2
        while True:
            x = parent.__next__()  # not next(): no interrupt between its return and `try`
            replay = self._replay
            try:
                if replay:  # a verdict remembered from a give-back (or the error it raised)
                    v = replay[0]
                    if isinstance(v, _Raise):
                        raise v.error
                    keep = bool(v)
                else:
                    keep = bool(fn(x))
            except Exception as e:
                _error_note(e, _stage_name(self.kind, fn), self._tested)
                if replay:  # consumed, as in Grain
                    del replay[0]
                self._tested += 1
                raise
            except BaseException as e:  # interrupted: the element goes back
                self._owed = ([x], [], replay)  # first, a plain store
                self._settle()
                _error_note(e, _stage_name(self.kind, fn), self._tested)
                raise
            self._tested += 1  # the commit: plain statements until the count
            if keep:
                self._verdicts, self._kept = [True], [x]
            if replay:
                del replay[0]
            else:
                self._seen_total += 1
                self._kept_total += keep
                self._count_one(keep)  # may raise: an accepted element stays in _kept
            if keep:
                self._served = 1
                return x

    def _failed(
        self, chunk: list[Any], verdicts: list[Any], replay: list[Any], e: Exception, n: int
    ) -> list[Any]:
        """After testing ``chunk`` stopped with ``e`` at element ``len(verdicts)`` (a truth value
        that cannot be computed stops it too, at that element; interrupts go to ``_settle``):
        an ``Exception`` consumes the failing element, gives back the ones after it and returns
        the accepted ones before it (raising ``e`` when there are none, else at the next call)."""
        parent, size, k = self._parent, len(chunk), len(verdicts)
        where = _stage_name(self.kind, self._fn)
        # Verdicts known for the elements from the chunk's first on (a failing one as _Raise).
        if k < size:  # `fn` (or a remembered verdict) failed at element k
            known = [*verdicts, _Raise(e), *replay[k + 1 :]]
            try:
                kept = list(itertools.compress(chunk, verdicts))
            except Exception:  # an earlier truth value fails: that element fails first
                kept, k, e = _truth_failure(chunk, verdicts)
        else:  # a verdict's truth value failed (verdicts of the whole chunk were computed)
            known = [*verdicts, *replay[size:]]
            kept, k, e = _truth_failure(chunk, verdicts)
        _error_note(e, where, self._tested + k)
        fresh = len(replay)
        if k + 1 < size:
            unread(parent, size - k - 1)  # then plain assignments only
        self._replay = known[k + 1 :]
        self._tested += k + 1
        # The failing element ends the latest chunk; its error is raised once `kept` is served
        # (also when counting raises the drop-ratio error first).
        self._verdicts, self._kept, self._error = verdicts[:k], kept, e
        self._count_fresh(verdicts[:k], fresh, len(kept))
        if not kept:
            self._verdicts, self._error = [], None
            raise e
        out = kept[:n]
        self._served = len(out)
        return out

    def _next_one(self):
        """One element, reading the parent (which cannot move back) one element at a time."""
        fn, parent = self._fn, self._parent
        while True:
            held = self._held
            if held is not None:
                x, before = held
            else:
                before = parent.get_state()
                x = parent.__next__()  # not next(): no interrupt between its return and `try`
            try:
                keep = bool(fn(x))
                self._count_one(keep)  # (interrupted here, the element is tested again)
            except Exception as e:
                _error_note(e, _stage_name(self.kind, fn), self._tested)
                self._held = None  # consumed, as in Grain
                self._tested += 1
                raise
            except BaseException as e:
                self._held = (x, before)  # first, a plain store: held with the state before it
                _error_note(e, _stage_name(self.kind, fn), self._tested)
                raise
            self._held = None  # the commit: plain assignments, no call
            self._tested += 1
            if keep:
                return x

    # --- state --------------------------------------------------------------------------------

    def _settle(self) -> None:
        """After an interrupt while testing a chunk (``_owed``: the chunk, the verdicts computed,
        the remembered verdicts it started with): gives the chunk back to the parent, remembering
        the verdicts, and reads little when called again. Ends with one store after its last
        call, so a second interrupt during it leaves ``_owed`` for the next call."""
        chunk, verdicts, replay = self._owed  # type: ignore[misc]
        remembered = verdicts + replay[len(verdicts) :]
        unread(self._parent, len(chunk))
        self._replay, self._step, self._owed = remembered, 1, None

    def _give_back(self) -> None:
        """Moves the parent back over the elements of the latest chunk after the last one returned
        (after the first accepted one if none was), remembering their verdicts."""
        verdicts, kept, s, error = self._verdicts, self._kept, self._served, self._error
        p = _after_accepted(verdicts, s, len(kept))
        back = len(verdicts) - p + (error is not None)
        if not back:
            return
        remembered = verdicts[p:]
        if error is not None:
            remembered.append(_Raise(error))
        remembered += self._replay
        unread(self._parent, back)  # then plain assignments only: all or nothing
        self._replay = remembered
        self._verdicts, self._kept, self._error = verdicts[:p], kept[:s], None
        self._tested -= back

    def get_state(self):
        if self._owed is not None:
            self._settle()
        held = self._held
        if held is not None:
            return _state.make_state(self.kind, parent=held[1])
        verdicts, s = self._verdicts, self._served
        if s < len(self._kept) or self._error is not None or (verdicts and not verdicts[-1]):
            self._give_back()
        # States taken every k elements (by thread_prefetch or device_put after each element, by
        # a training loop after each step): read about k ahead, so each give-back stays small.
        since = self._since + s
        self._step = since if 0 < since < self._MAX_AHEAD else (1 if since <= 0 else self._MAX_AHEAD)
        self._since = -s
        return _state.make_state(self.kind, parent=self._parent.get_state())

    def restore_position(self, state):
        self._held = self._owed = None
        self._error = None
        self._replay = []
        self._verdicts, self._kept, self._served = [], [], 0
        self._step, self._since = 1, 0

    # --- the drop-ratio check -----------------------------------------------------------------

    def _count_fresh(self, verdicts: list[Any], remembered: int, kept: int) -> None:
        """Counts the newly tested elements among ``verdicts`` (those after the first
        ``remembered``; ``kept`` is the number accepted among all of them) for the read-ahead
        estimate and the drop-ratio check (which splits them into Grain's windows)."""
        if remembered:
            kept -= _true_count(verdicts[:remembered])  # (remembered: a few given back)
            verdicts = verdicts[remembered:]
        size = len(verdicts)
        if not size:
            return
        self._kept_total += kept
        self._seen_total += size

        def dropped_in(start: int, stop: int) -> int:
            if start == 0 and stop == size:
                return size - kept
            return stop - start - _true_count(verdicts[start:stop])

        self._check.record_chunk(size, dropped_in, self._options)

    def _count_one(self, keep: bool) -> None:
        """Counts one element tested by ``_next_one`` (see ``_count_fresh``)."""
        self._check.record(0 if keep else 1, 1, self._options)


def _true_count(verdicts: list[Any]) -> int:
    """How many of ``verdicts`` are true (``bool`` of each, as ``sum(map(bool, ...))`` counts, in
    one C loop without a call per element: about 6x faster)."""
    return len(list(itertools.compress(verdicts, verdicts)))


def _after_accepted(verdicts: list[Any], s: int, accepted: int) -> int:
    """The index after the ``s``-th true one of ``verdicts`` (``accepted`` of them are true), or
    with ``s == 0`` the index of the first true one (``len(verdicts)`` if none). Counted in C
    from the nearer end: a state taken at a chunk's end (a batch spanning two chunks) costs the
    elements after its last accepted one, not the whole chunk."""
    n = len(verdicts)
    if not s:
        return next(itertools.compress(range(n), verdicts), n)
    after = accepted - s  # true verdicts after the s-th one
    if after < s:
        backwards = itertools.compress(range(n - 1, -1, -1), reversed(verdicts))
        return next(itertools.islice(backwards, after, None)) + 1
    return next(itertools.islice(itertools.compress(range(n), verdicts), s - 1, None)) + 1


def _replayed_verdicts(chunk: list[Any], replay: list[Any], fn: Any, out: list[Any]) -> None:
    """Appends the verdicts of ``chunk`` to ``out``: the remembered ones (``replay``) first, raising
    the error of a remembered failing element, then ``fn``'s."""
    j = min(len(replay), len(chunk))
    if _Raise not in set(map(type, replay[:j])):  # the common case, checked in C: no error
        out += replay[:j]
        if len(chunk) > j:
            out.extend(map(fn, chunk[j:]))
        return
    for i in range(j):
        r = replay[i]
        if isinstance(r, _Raise):
            out += replay[:i]
            raise r.error
    out += replay[:j]
    if len(chunk) > j:
        out.extend(map(fn, chunk[j:]))


def _truth_failure(chunk: list[Any], verdicts: list[Any]) -> tuple[list[Any], int, Exception]:
    """The accepted elements before the first verdict whose truth value raises, its index and
    the error (which ``bool(verdict)`` raises in element-wise reading)."""
    kept: list[Any] = []
    for k, v in enumerate(verdicts):
        try:
            keep = bool(v)
        except Exception as e:
            return kept, k, e
        if keep:
            kept.append(chunk[k])
    raise AssertionError("no verdict fails")  # pragma: no cover  (only called after one failed)


# --- many-to-one and one-to-many --------------------------------------------------------------------
