"""The core ``IterDataset`` transformations and their checkpointable iterators."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from grain_core import seeds as _seeds
from grain_core import state as _state
from grain_core import transforms as tr
from grain_core import tree
from grain_core.dataset.base import DatasetIterator, IterDataset, _SeedLineage
from grain_core.dataset.callables import as_callable
from grain_core.dataset.chunking import CHUNK_BYTES, can_unread, unread
from grain_core.dataset.filter_ratio import FilterRatioCheck
from grain_core.dataset.map_ops import stack_batch
from grain_core.dataset.next_index import get_next_index, set_next_index
from grain_core.dataset.sharing import current_worker
from grain_core.options import DatasetOptions
from grain_core.validation import check_instance, check_int


def _check_iter_parent(parent: Any, where: str) -> IterDataset:
    return check_instance(parent, IterDataset, where, verb="expects")


class _OneParentIterDataset(IterDataset):
    def __init__(self, parent: IterDataset):
        super().__init__(_check_iter_parent(parent, type(self).__name__))
        self._parent = parent


class _OneParentIterator(DatasetIterator):
    """An iterator over one parent whose state is ``{kind, parent, **extra}``."""

    kind = ""

    def __init__(self, parent: DatasetIterator):
        super().__init__(parent)
        self._parent = parent

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _check_extra_state(self, state: Mapping[str, Any]) -> None:
        """Raises ``StateMismatchError`` if ``state``'s own fields do not fit this iterator; changes
        nothing. Called before anything is restored."""

    def _set_extra_state(self, state: Mapping[str, Any]) -> None:
        pass

    def get_state(self):
        return _state.make_state(self.kind, parent=self._parent.get_state(), **self._extra_state())

    def set_state(self, state):
        _state.expect_state(state, self.kind, ("parent", *self._extra_state()))
        self._check_extra_state(state)
        with _state.rollback_on_error(self):
            self._parent.set_state(state["parent"])
            self._set_extra_state(state)


def _stage_name(kind: str, fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{kind}({name})"


def _error_note(e: BaseException, where: str, position: int) -> None:
    note = f"raised in {where} while producing element #{position} (counted from 0)"
    if note not in getattr(e, "__notes__", ()):
        e.add_note(note)


class _Raise:
    """In a replay list: the element here raised ``error`` (raised again, not recomputed)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


class _ChunkedOneToOne(_OneParentIterator):
    """A stage calling ``self._fn`` once per parent element, on whole chunks where it can.

    Its ``_count`` is the number of elements returned; an exception from the function gets a note
    naming the element (the context ``mp_prefetch`` workers give too). On an ``Exception`` the
    failing element is consumed (as with ``next()``) and the elements before it in the chunk are
    returned first (a ``get_state()`` before the error is raised gives the failing element back,
    to be raised again when reached, so the state is the position after the last element
    returned); on any other ``BaseException`` (``KeyboardInterrupt``) nothing of the chunk is
    consumed, so continuing yields exactly the remaining elements."""

    one_to_one = True

    def __init__(self, parent, fn):
        super().__init__(parent)
        self._fn = fn
        self._count = 0
        self._chunked = self.can_unread = can_unread(parent)
        self._pending: BaseException | None = None
        # Outputs of elements the parent was moved back over (by unread): served again without
        # calling the function a second time, while the parent is moved forward over them.
        self._replay: list[Any] = []
        self._last_out: list[Any] = []  # what the latest call returned (for unread)
        # A parent that cannot move back: the element whose function call was interrupted and the
        # parent's state before it (the state of this stage until that element is returned).
        self._held: tuple[Any, Any] | None = None
        # After an interrupt: what the interrupted call still owes its parent (a list of the
        # elements, or a count), noted with a plain store before the give-back and dropped right
        # after it; a second interrupt during the give-back leaves it for the next call.
        self._owed: Any = None

    def _settle(self) -> None:
        """Gives the parent back what an interrupted call noted in ``_owed``."""
        owed = self._owed
        n = owed if isinstance(owed, int) else len(owed)
        if n:
            unread(self._parent, n)  # then no call before the note goes
        self._owed = None

    def get_state(self):
        if self._owed is not None:
            self._settle()
        held = self._held
        if held is not None:
            return _state.make_state(self.kind, parent=held[1], **self._extra_state())
        if self._pending is not None:
            self._give_back_pending()
        return super().get_state()

    def _give_back_pending(self) -> None:
        """Moves the parent back over the failing element whose error is pending (consumed when
        it is raised), so the state is the position after the last element returned; the error
        is raised again, not recomputed, when that element is reached."""
        assert self._pending is not None
        replay = [_Raise(self._pending), *self._replay]
        unread(self._parent, 1)  # then plain assignments only: all or nothing
        self._pending = None
        self._replay = replay
        self._count -= 1

    def _where(self) -> str:
        return _stage_name(self.kind, self._fn)

    def _call(self, x: Any, i: int) -> Any:
        raise NotImplementedError

    def _raise_pending(self) -> None:
        e, self._pending = self._pending, None
        assert e is not None
        raise e

    def _take_replay(self, n: int) -> list[Any]:
        """Serves outputs given back earlier, moving the parent over their elements. The parent
        moves first and everything else is plain assignments after it (given back again if an
        interrupt lands in between), so an interrupt leaves both or neither moved."""
        replay = self._replay
        if isinstance(replay[0], _Raise):  # the failing element: consumed, its error raised
            self._parent.next_chunk(1)
            self._replay = replay[1:]
            self._count += 1
            self._last_out = []
            raise replay[0].error
        k = 0
        limit = min(n, len(replay))
        while k < limit and not isinstance(replay[k], _Raise):
            k += 1
        # Move the parent over the elements these outputs were made from, in one call (so that
        # the parent can give them back again if asked): it may return fewer than asked.
        moved: list[Any] = []
        try:
            moved = self._parent.next_chunk(k)
            k = len(moved)
        except BaseException:
            self._owed = moved  # first, a plain store; given back now or by the next call
            self._settle()
            raise
        out, self._replay = replay[:k], replay[k:]
        self._count += k
        self._last_out = out
        return out

    def __next__(self):
        if self._owed is not None:
            self._settle()
        if self._pending is not None:
            self._raise_pending()
        if self._replay:
            return self._take_replay(1)[0]
        held = self._held
        if held is not None:
            x, before = held
        else:
            before = None if self._chunked else self._parent.get_state()
            x = self._parent.__next__()  # not next(): no interrupt between its return and `try`
        i = self._count
        try:
            y = self._call(x, i)
        except Exception as e:
            self._fail_one(e, i, x, before)
            raise
        except BaseException as e:
            # An interrupt: noted first with plain stores (a second interrupt cannot split them).
            if self._chunked:
                self._owed = 1
            else:
                self._held = (x, before)
            self._fail_one(e, i, x, before)
            raise
        self._held = None  # the commit: plain assignments, no call
        self._count = i + 1
        if self._chunked:
            self._last_out = [y]
        return y

    def _fail_one(self, e: BaseException, i: int, x: Any = None, before: Any = None) -> None:
        """After the function raised on element ``i`` (``x``) read by ``next()``: an
        ``Exception`` consumes it, an interrupt does not (it goes back to the parent, or, if the
        parent cannot move back, is held with the parent's state ``before`` it)."""
        if isinstance(e, Exception):
            self._held = None
            self._count = i + 1
        elif self._chunked:
            self._owed = 1  # (the caller noted it already)
            self._settle()
        else:
            self._held = (x, before)
        self._last_out = []
        _error_note(e, self._where(), i)

    def _apply(self, chunk: list[Any], start: int, out: list[Any]) -> None:
        """Appends the function of each element of ``chunk`` (element ``k`` is element
        ``start + k``) to ``out``; when it raises, ``out`` holds the results before the failure."""
        call = self._call
        append = out.append
        for k, x in enumerate(chunk):
            append(call(x, start + k))

    def next_chunk(self, max_elements: int) -> list[Any]:
        if not self._chunked:
            return [self.__next__()]
        if self._owed is not None:
            self._settle()
        if self._pending is not None:
            self._raise_pending()
        if self._replay:
            return self._take_replay(max_elements)
        chunk = self._parent.next_chunk(max_elements)
        start = self._count
        out: list[Any] = []
        try:
            self._apply(chunk, start, out)
            end = start + len(out)
        except Exception as e:
            done = out
            self._last_out = []
            _error_note(e, self._where(), start + len(done))
            if isinstance(e, Exception) and done:
                unread(self._parent, len(chunk) - len(done) - 1)
                self._pending = e
                self._count = start + len(done) + 1
                self._last_out = done
                return done
            unread(self._parent, len(chunk) - 1)
            self._count = start + 1
            raise
        except BaseException as e:
            self._owed = chunk  # first, a plain store: nothing of the chunk is consumed
            self._last_out = []
            self._settle()
            _error_note(e, self._where(), start + len(out))
            raise
        self._count = end  # the commit: plain assignments, no call
        self._last_out = out
        return out

    def unread(self, count: int) -> None:
        """Gives back the last ``count`` outputs (kept for replay). Computes first, moves the
        parent, then assigns: an interrupt before the parent moved changes nothing."""
        if count <= 0:
            return
        last, pending = self._last_out, self._pending
        back = count
        given_back = last[len(last) - count :]
        if pending is not None:  # the failing element after them is given back too
            given_back.append(_Raise(pending))
            back += 1
        replay = given_back + self._replay
        kept = last[: len(last) - count]
        unread(self._parent, back)
        self._pending = None
        self._replay = replay
        self._last_out = kept
        self._count -= back

    def _set_extra_state(self, state):
        self._held = None
        self._owed = None
        self._pending = None
        self._replay, self._last_out = [], []
        self._count = int(state.get("count", 0))


# --- pass-through stages ---------------------------------------------------------------------------


class _PassThroughIterator(DatasetIterator):
    one_to_one = True

    def __init__(self, parent: DatasetIterator):
        super().__init__(parent)
        self._parent = parent
        self.can_unread = can_unread(parent)

    def __next__(self):
        return self._parent.__next__()  # not next(): see _ChunkedOneToOne.__next__

    def next_chunk(self, max_elements: int) -> list[Any]:
        return self._parent.next_chunk(max_elements)

    def unread(self, count: int) -> None:
        unread(self._parent, count)

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)


class SeedIterDataset(_OneParentIterDataset):
    """Passes elements through; sets the pipeline seed for downstream random transformations."""

    def __init__(self, parent: IterDataset, seed: int):
        super().__init__(parent)
        self._seed = _seeds.validate_seed(seed, bounded=False)
        self._seed_rng_seed = self._seed  # read by grain_core.seeds.default_seed
        self._lineage = _SeedLineage((self._seed,), 0)

    def __iter__(self):
        return _PassThroughIterator(iter(self._parent))


class WithOptionsIterDataset(_OneParentIterDataset):
    """Applies ``DatasetOptions`` to every stage upstream of this one."""

    def __init__(self, parent: IterDataset, options: DatasetOptions):
        super().__init__(parent)
        self.options = check_instance(options, DatasetOptions, "options")

    def __iter__(self):
        it = _PassThroughIterator(iter(self._parent))
        it._apply_options(self.options)
        return it


# --- one-to-one ------------------------------------------------------------------------------------


class MapIterDataset(_OneParentIterDataset):
    """``transform(element)`` for each element."""

    def __init__(self, parent: IterDataset, transform: Any):
        super().__init__(parent)
        self._transform = transform
        self._fn = as_callable(transform, tr.Map, "map()")

    def __iter__(self):
        return _MapIterator(iter(self._parent), self._fn)

    def __str__(self):
        return f"MapIterDataset({tr.transform_name(self._transform)})"


class _MapIterator(_ChunkedOneToOne):
    kind = "MapIterDataset"

    def _call(self, x, i):
        return self._fn(x)

    def __next__(self):  # the per-element path, without the generic _call indirection
        if self._pending is not None or self._replay or not self._chunked or self._owed is not None:
            return super().__next__()
        x = self._parent.__next__()  # not next(): no interrupt between its return and `try`
        try:
            y = self._fn(x)
        except Exception as e:
            self._fail_one(e, self._count, x)
            raise
        except BaseException as e:
            self._owed = 1  # first, a plain store: x goes back to the parent
            self._fail_one(e, self._count, x)
            raise
        self._count += 1
        if self._chunked:
            self._last_out = [y]
        return y

    def _apply(self, chunk, start, out):
        # A C-level loop; `list.extend` keeps what the iterator produced before it raised.
        out.extend(map(self._fn, chunk))


class RandomMapIterDataset(_OneParentIterDataset):
    """``transform(element, rng)`` with ``rng = element_rng(seed, number of elements before it)``.

    In worker ``w`` of ``K`` (``mp_prefetch`` / ``multithread_prefetch``) the ``n``-th element the
    worker maps gets ``element_rng(seed, w + n * K)``, as in Grain: with strided worker shares every
    element gets the generator it gets without workers.
    """

    def __init__(self, parent: IterDataset, transform: Any, seed: int | None = None):
        super().__init__(parent)
        self._transform = transform
        self._fn = as_callable(transform, tr.RandomMap, "random_map()")
        self._seed = self.resolve_seed(seed, bounded=False)

    def __iter__(self):
        return _RandomMapIterator(iter(self._parent), self._fn, self._seed)

    def __str__(self):
        return f"RandomMapIterDataset({tr.transform_name(self._transform)}, seed={self._seed})"


class _RandomMapIterator(_ChunkedOneToOne):
    kind = "RandomMapIterDataset"

    def __init__(self, parent, fn, seed):
        super().__init__(parent, fn)
        self._seed = seed
        self._rngs = _seeds.ElementRngs(seed)
        # Grain's mp_context: worker w of K numbers its elements w, w + K, w + 2K, ...
        self._worker, self._workers = current_worker() or (0, 1)

    def _call(self, x, i):
        return self._fn(x, self._rngs(self._worker + i * self._workers))

    def _extra_state(self):
        return {"count": self._count, "seed": self._seed}

    def _check_extra_state(self, state):
        if state["seed"] != self._seed:
            raise _state.StateMismatchError(
                f"random_map state has seed {state['seed']}, this pipeline has {self._seed}: the "
                "state comes from a different pipeline."
            )



class MapWithIndexIterDataset(_OneParentIterDataset):
    """``transform(i, element)`` where ``i`` counts elements from 0."""

    def __init__(self, parent: IterDataset, transform: Any):
        super().__init__(parent)
        self._transform = transform
        self._fn = as_callable(transform, tr.MapWithIndex, "map_with_index()")

    def __iter__(self):
        return _MapWithIndexIterator(iter(self._parent), self._fn)


class _MapWithIndexIterator(_ChunkedOneToOne):
    kind = "MapWithIndexIterDataset"

    def _call(self, x, i):
        return self._fn(i, x)

    def _apply(self, chunk, start, out):
        out.extend(map(self._fn, range(start, start + len(chunk)), chunk))  # see _MapIterator

    def _extra_state(self):
        return {"count": self._count}



class FilterIterDataset(_OneParentIterDataset):
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


class _FilterIterator(_OneParentIterator):
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
    elements; a ``next_chunk(n)`` read covers at least ``n`` accepted elements (as estimated from
    the fraction accepted so far). ``get_state()`` restarts the growth at the number of elements
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
    _MAX_ASK = 2048  # parent elements one read asks for at most
    _MAX_AHEAD = 512  # accepted elements one read aims at, at most (unless more are asked for)

    def __init__(self, parent, fn, name="filter()"):
        super().__init__(parent)
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
        positions = list(itertools.compress(range(len(verdicts)), verdicts))
        p = positions[s - 1] + 1 if s else (positions[0] if positions else len(verdicts))
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
            return _state.make_state(self.kind, parent=held[1], **self._extra_state())
        verdicts, s = self._verdicts, self._served
        if s < len(self._kept) or self._error is not None or (verdicts and not verdicts[-1]):
            self._give_back()
        # States taken every k elements (by thread_prefetch or device_put after each element, by
        # a training loop after each step): read about k ahead, so each give-back stays small.
        since = self._since + s
        self._step = since if 0 < since < self._MAX_AHEAD else (1 if since <= 0 else self._MAX_AHEAD)
        self._since = -s
        return _state.make_state(self.kind, parent=self._parent.get_state())

    def _set_extra_state(self, state):
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
            verdicts = verdicts[remembered:]
            kept = sum(map(bool, verdicts))
        size = len(verdicts)
        if not size:
            return
        self._kept_total += kept
        self._seen_total += size

        def dropped_in(start: int, stop: int) -> int:
            if start == 0 and stop == size:
                return size - kept
            return stop - start - sum(map(bool, verdicts[start:stop]))

        self._check.record_chunk(size, dropped_in, self._options)

    def _count_one(self, keep: bool) -> None:
        """Counts one element tested by ``_next_one`` (see ``_count_fresh``)."""
        self._check.record(0 if keep else 1, 1, self._options)


def _replayed_verdicts(chunk: list[Any], replay: list[Any], fn: Any, out: list[Any]) -> None:
    """Appends the verdicts of ``chunk`` to ``out``: the remembered ones (``replay``) first, raising
    the error of a remembered failing element, then ``fn``'s."""
    j = min(len(replay), len(chunk))
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


class BatchIterDataset(_OneParentIterDataset):
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


class _BatchIterator(_OneParentIterator):
    kind = "BatchIterDataset"

    def __init__(self, parent, bs, drop, batch_fn):
        super().__init__(parent)
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
        return _state.make_state(self.kind, parent=held[1], **self._extra_state())

    def _set_extra_state(self, state):
        self._held = self._owed = None

    def _extra_state(self):
        return {"batch_size": self._bs}

    def _check_extra_state(self, state):
        _check_batch_size_field(state, self._bs)


def _check_batch_size_field(state: Mapping[str, Any], batch_size: int) -> None:
    if state["batch_size"] != batch_size:
        raise _state.StateMismatchError(
            f"The {state['kind']!r} state has batch_size={state['batch_size']!r}, this pipeline has "
            f"{batch_size}: the state comes from a different pipeline."
        )


class _SnapshotIterator(_OneParentIterator):
    """An iterator that expands each parent element into a list, restoring by replay: its state is
    the parent's state before the current element plus how far into the expansion it got."""

    def __init__(self, parent):
        super().__init__(parent)
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
        return _state.make_state(self.kind, parent=self._before, taken=self._taken, **self._extra_state())

    def set_state(self, state):
        _state.expect_state(state, self.kind, ("parent", "taken", *self._extra_state()))
        self._check_extra_state(state)
        taken = int(state["taken"])
        if taken < 0:
            raise _state.StateMismatchError(f"The {self.kind!r} state has taken={taken} < 0.")
        with _state.rollback_on_error(self):
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


class FlatMapIterDataset(_OneParentIterDataset):
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


class LimitIterDataset(_OneParentIterDataset):
    """At most ``count`` elements of the parent."""

    def __init__(self, parent: IterDataset, count: int):
        super().__init__(parent)
        self._count = check_int(count, "LimitIterDataset count", minimum=1)

    def __iter__(self):
        return _LimitIterator(iter(self._parent), self._count)


class _LimitIterator(_OneParentIterator):
    kind = "LimitIterDataset"

    def __init__(self, parent, limit):
        super().__init__(parent)
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

    def _extra_state(self):
        return {"count": self._count}

    def _set_extra_state(self, state):
        self._count = int(state["count"])


# RebatchIterDataset, ZipIterDataset and RepeatIterDataset live in reshape_ops.
