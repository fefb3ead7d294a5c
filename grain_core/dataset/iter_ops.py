"""The core ``IterDataset`` transformations and their checkpointable iterators."""

from __future__ import annotations

from typing import Any

from grain_core import seeds as _seeds
from grain_core import state as _state
from grain_core import transforms as tr
from grain_core.dataset.base import IterDataset
from grain_core.dataset.callables import as_callable
from grain_core.dataset.chunking import can_unread, unread
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.seed_lineage import SeedLineage
from grain_core.dataset.sharing import current_worker
from grain_core.dataset.stages import OneParentIterator, OneParentIterDataset
from grain_core.options import DatasetOptions
from grain_core.state import StateField
from grain_core.validation import check_instance


def _check_iter_parent(parent: Any, where: str) -> IterDataset:
    return check_instance(parent, IterDataset, where, verb="expects")


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


class _ChunkedOneToOne(OneParentIterator):
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
        self._parent = parent  # Grain's attribute, set: read per element
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
            return _state.make_state(self.state_kind, parent=held[1], **self.position_state())
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
        return _stage_name(self.state_kind, self._fn)

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

    def restore_position(self, state):
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


class SeedIterDataset(OneParentIterDataset):
    """Passes elements through; sets the pipeline seed for downstream random transformations."""

    def __init__(self, parent: IterDataset, seed: int):
        super().__init__(parent)
        self._seed = _seeds.validate_seed(seed, bounded=False)
        self._seed_rng_seed = self._seed  # read by grain_core.seeds.default_seed
        self._lineage = SeedLineage((self._seed,), 0)

    def __iter__(self):
        return _PassThroughIterator(iter(self._parent))


class WithOptionsIterDataset(OneParentIterDataset):
    """Applies ``DatasetOptions`` to every stage upstream of this one."""

    def __init__(self, parent: IterDataset, options: DatasetOptions):
        super().__init__(parent)
        self.options = check_instance(options, DatasetOptions, "options")

    def __iter__(self):
        it = _PassThroughIterator(iter(self._parent))
        it.apply_options(self.options)
        return it


# --- one-to-one ------------------------------------------------------------------------------------


class MapIterDataset(OneParentIterDataset):
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


class RandomMapIterDataset(OneParentIterDataset):
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

    def position_fields(self):
        return {"count": StateField.position(), "seed": StateField.identity()}

    def position_state(self):
        return {"count": self._count, "seed": self._seed}



class MapWithIndexIterDataset(OneParentIterDataset):
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

    def position_fields(self):
        return {"count": StateField.position()}

    def position_state(self):
        return {"count": self._count}
