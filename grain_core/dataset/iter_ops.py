"""The core ``IterDataset`` transformations and their checkpointable iterators."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from grain_core import seeds as _seeds
from grain_core import state as _state
from grain_core import transforms as tr
from grain_core import tree
from grain_core.dataset.base import DatasetIterator, IterDataset, _SeedLineage
from grain_core.dataset.callables import as_callable
from grain_core.dataset.chunking import can_unread, unread
from grain_core.dataset.map_ops import stack_batch
from grain_core.dataset.prefetch import FilterRatioCheck
from grain_core.dataset.sharing import current_worker
from grain_core.options import DatasetOptions
from grain_core.validation import check_int


def _check_iter_parent(parent: Any, where: str) -> IterDataset:
    if not isinstance(parent, IterDataset):
        raise TypeError(f"{where} expects an IterDataset, got {type(parent).__name__}.")
    return parent


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
    returned first; on any other ``BaseException`` (``KeyboardInterrupt``) nothing of the chunk is
    consumed, so continuing yields exactly the remaining elements."""

    one_to_one = True

    def __init__(self, parent, fn):
        super().__init__(parent)
        self._fn = fn
        self._count = 0
        self._chunked = can_unread(parent)
        self._pending: BaseException | None = None
        # Outputs of elements the parent was moved back over (by _unread): served again without
        # calling the function a second time, while the parent is moved forward over them.
        self._replay: list[Any] = []
        self._last_out: list[Any] = []  # what the latest call returned (for _unread)
        if not self._chunked:
            self._unread = None  # type: ignore[assignment]  # see can_unread

    def _where(self) -> str:
        return _stage_name(self.kind, self._fn)

    def _call(self, x: Any, i: int) -> Any:
        raise NotImplementedError

    def _raise_pending(self) -> None:
        e, self._pending = self._pending, None
        assert e is not None
        raise e

    def _take_replay(self, n: int) -> list[Any]:
        replay = self._replay
        if isinstance(replay[0], _Raise):  # the failing element: consumed, its error raised
            self._replay = replay[1:]
            self._parent.next_chunk(1)
            self._count += 1
            self._last_out = []
            raise replay[0].error
        k = 0
        limit = min(n, len(replay))
        while k < limit and not isinstance(replay[k], _Raise):
            k += 1
        # Move the parent over the elements these outputs were made from, in one call (so that
        # the parent can give them back again if asked): it may return fewer than asked.
        k = len(self._parent.next_chunk(k))
        out, self._replay = replay[:k], replay[k:]
        self._count += k
        self._last_out = out
        return out

    def __next__(self):
        if self._pending is not None:
            self._raise_pending()
        if self._replay:
            return self._take_replay(1)[0]
        x = next(self._parent)
        i = self._count
        try:
            y = self._call(x, i)
        except BaseException as e:
            self._fail_one(e, i)
            raise
        self._count = i + 1
        if self._chunked:
            self._last_out = [y]
        return y

    def _fail_one(self, e: BaseException, i: int) -> None:
        """After the function raised on element ``i`` read by ``next()``: an ``Exception``
        consumes it, an interrupt does not."""
        if isinstance(e, Exception):
            self._count = i + 1
        elif self._chunked:
            unread(self._parent, 1)
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
        if self._pending is not None:
            self._raise_pending()
        if self._replay:
            return self._take_replay(max_elements)
        chunk = self._parent.next_chunk(max_elements)
        start = self._count
        out: list[Any] = []
        try:
            self._apply(chunk, start, out)
        except BaseException as e:
            done = out
            self._last_out = []
            _error_note(e, self._where(), start + len(done))
            if isinstance(e, Exception) and done:
                unread(self._parent, len(chunk) - len(done) - 1)
                self._pending = e
                self._count = start + len(done) + 1
                self._last_out = done
                return done
            if isinstance(e, Exception):
                unread(self._parent, len(chunk) - 1)
                self._count = start + 1
            else:
                unread(self._parent, len(chunk))
            raise
        self._count = start + len(out)
        self._last_out = out
        return out

    def _unread(self, count: int) -> None:
        if count <= 0:
            return
        last = self._last_out
        back = count
        given_back = last[len(last) - count :]
        if self._pending is not None:  # the failing element after them is given back too
            given_back.append(_Raise(self._pending))
            self._pending = None
            back += 1
        self._replay = given_back + self._replay
        self._last_out = last[: len(last) - count]
        unread(self._parent, back)
        self._count -= back

    def _set_extra_state(self, state):
        self._pending = None
        self._replay, self._last_out = [], []
        self._count = int(state.get("count", 0))


# --- pass-through stages ---------------------------------------------------------------------------


class _PassThroughIterator(DatasetIterator):
    one_to_one = True

    def __init__(self, parent: DatasetIterator):
        super().__init__(parent)
        self._parent = parent
        if not can_unread(parent):
            self._unread = None  # type: ignore[assignment]  # see can_unread

    def __next__(self):
        return next(self._parent)

    def next_chunk(self, max_elements: int) -> list[Any]:
        return self._parent.next_chunk(max_elements)

    def _unread(self, count: int) -> None:
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
        if not isinstance(options, DatasetOptions):
            raise TypeError(f"options must be a DatasetOptions, got {type(options).__name__}.")
        self.options = options

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
        if self._pending is not None or self._replay:
            return super().__next__()
        x = next(self._parent)
        try:
            y = self._fn(x)
        except BaseException as e:
            self._fail_one(e, self._count)
            raise
        self._count += 1
        if self._chunked:
            self._last_out = [y]
        return y

    def _apply(self, chunk, start, out):
        fn = self._fn
        append = out.append
        for x in chunk:
            append(fn(x))


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
        fn = self._fn
        append = out.append
        for k, x in enumerate(chunk, start):
            append(fn(k, x))

    def _extra_state(self):
        return {"count": self._count}



class FilterIterDataset(_OneParentIterDataset):
    """Only the elements for which ``transform(element)`` is true."""

    def __init__(self, parent: IterDataset, transform: Any):
        super().__init__(parent)
        self._transform = transform
        self._fn = as_callable(transform, tr.Filter, "filter()")

    def __iter__(self):
        return _FilterIterator(iter(self._parent), self._fn)

    def __str__(self):
        return f"FilterIterDataset({tr.transform_name(self._transform)})"


class _FilterIterator(_OneParentIterator):
    """Keeps the elements ``fn`` accepts, testing whole chunks where the parent allows (see
    :class:`_ChunkedOneToOne` for what an exception from ``fn`` leaves behind).

    Asked for ``n`` elements, it reads about ``n / (fraction kept so far)`` parent elements, so one
    parent chunk usually fills the request; what it read beyond the ``n``-th kept element is given
    back to the parent (``_unread``) with its verdicts remembered, so no element is tested twice."""

    kind = "FilterIterDataset"
    _CHECK_EVERY = 256
    _MAX_ASK = 1024

    def __init__(self, parent, fn):
        super().__init__(parent)
        self._fn = fn
        self._check = FilterRatioCheck("filter()")
        self._seen = 0
        self._dropped = 0
        self._tested = 0  # parent elements tested (for error messages)
        self._kept_total = 0
        self._seen_total = 0
        self._chunked = can_unread(parent)
        self._last: tuple[int, list[Any]] = (0, [])  # (parent elements read, their verdicts)
        self._replay: list[Any] = []  # verdicts of the next parent elements (given back before)
        self._pending: BaseException | None = None
        if not self._chunked:
            self._unread = None  # type: ignore[assignment]  # see can_unread

    def _raise_pending(self) -> None:
        e, self._pending = self._pending, None
        assert e is not None
        raise e

    def __next__(self):
        if self._pending is not None:
            self._raise_pending()
        fn, parent = self._fn, self._parent
        while True:
            x = next(parent)
            if self._replay:
                keep = self._replay.pop(0)
                if isinstance(keep, _Raise):
                    self._tested += 1
                    self._last = (0, [])
                    raise keep.error
            else:
                try:
                    keep = fn(x)
                except BaseException as e:
                    _error_note(e, _stage_name(self.kind, fn), self._tested)
                    self._last = (0, [])
                    if isinstance(e, Exception):
                        self._tested += 1
                    elif self._chunked:
                        unread(parent, 1)
                    raise
                self._seen_total += 1
                if keep:
                    self._kept_total += 1
                self._count_seen(1, 0 if keep else 1)
            self._tested += 1
            if keep:
                self._last = (1, [True])
                return x

    def _verdicts(self, chunk: list[Any], out: list[Any]) -> None:
        """Appends the verdict of every element of ``chunk`` to ``out``: remembered ones first,
        then ``fn``'s (when it raises, ``out`` holds the verdicts before the failure)."""
        replay = self._replay
        if replay:
            k = min(len(replay), len(chunk))
            for j in range(k):
                if isinstance(replay[j], _Raise):  # an element that failed: fail again
                    out += replay[:j]
                    self._replay = replay[j + 1 :]
                    raise replay[j].error
            out += replay[:k]
            self._replay = replay[k:]
            chunk = chunk[k:]
        append, fn = out.append, self._fn
        for x in chunk:
            append(fn(x))

    def next_chunk(self, max_elements: int) -> list[Any]:
        if not self._chunked:
            return [self.__next__()]
        if self._pending is not None:
            self._raise_pending()
        parent = self._parent
        while True:
            ask = max_elements
            if self._seen_total:
                kept = max(self._kept_total, 1)
                ask = min(self._MAX_ASK, max(ask, -(-max_elements * self._seen_total // kept) + 1))
            remembered = len(self._replay)
            chunk = parent.next_chunk(ask)
            verdicts: list[Any] = []
            try:
                self._verdicts(chunk, verdicts)
            except BaseException as e:
                k, n = len(verdicts), len(chunk)
                _error_note(e, _stage_name(self.kind, self._fn), self._tested + k)
                self._count_fresh(verdicts[remembered:])
                self._last = (0, [])
                if isinstance(e, Exception):  # the failing element is consumed
                    self._tested += k + 1
                    unread(parent, n - k - 1)
                    kept = list(itertools.compress(chunk, verdicts))
                    if kept:
                        self._pending = e
                        self._last = (k + 1, verdicts)
                        return kept
                else:  # interrupted: nothing of the chunk is consumed
                    unread(parent, n)
                    self._replay = verdicts  # (what was remembered is part of this chunk)
                raise
            n = len(chunk)
            self._count_fresh(verdicts[remembered:])
            kept = list(itertools.compress(chunk, verdicts))
            if len(kept) > max_elements:
                # Give back what follows the max_elements-th kept element; remember its verdicts.
                idx, found = 0, 0
                while found < max_elements:
                    if verdicts[idx]:
                        found += 1
                    idx += 1
                unread(parent, n - idx)
                self._replay = verdicts[idx:] + self._replay
                self._tested += idx
                self._last = (idx, verdicts[:idx])
                return kept[:max_elements]
            self._tested += n
            if kept:
                self._last = (n, verdicts)
                return kept

    def _count_fresh(self, verdicts: list[Any]) -> None:
        """Counts newly tested elements for the drop-ratio check and the read-ahead estimate."""
        if verdicts:
            kept = sum(map(bool, verdicts))
            self._kept_total += kept
            self._seen_total += len(verdicts)
            self._count_seen(len(verdicts), len(verdicts) - kept)

    def _count_seen(self, seen: int, dropped: int) -> None:
        self._seen += seen
        self._dropped += dropped
        if self._seen >= self._CHECK_EVERY:
            self._flush()

    def _unread(self, count: int) -> None:
        """Moves the parent back to just after the element before the last ``count`` kept ones,
        remembering the verdicts of the elements given back."""
        if count <= 0:
            return
        n, verdicts = self._last
        pos = len(verdicts)
        while count:
            pos -= 1
            if verdicts[pos]:
                count -= 1
        unread(self._parent, n - pos)
        # Verdicts known for the elements given back, and the error of a failing one after them.
        given_back = verdicts[pos:]
        if self._pending is not None:
            given_back.append(_Raise(self._pending))
            self._pending = None
        self._replay = given_back + self._replay
        self._tested -= n - pos
        self._last = (pos, verdicts[:pos])

    def _set_extra_state(self, state):
        self._pending = None
        self._replay = []
        self._last = (0, [])

    def _flush(self):
        seen, dropped = self._seen, self._dropped
        self._seen = self._dropped = 0
        self._check.record(dropped, seen, self._options)


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

    def __next__(self):
        parent = self._parent
        need = self._bs
        items: list[Any] = []
        before = None  # the parent's state where this batch began, once it takes several calls
        try:
            while need:
                try:
                    chunk = parent.next_chunk(need)
                except StopIteration:
                    if not items or self._drop:
                        raise
                    break
                if len(chunk) > need:
                    raise RuntimeError(
                        f"{type(parent).__name__}.next_chunk({need}) returned {len(chunk)} "
                        "elements; next_chunk must return at most max_elements."
                    )
                if before is None and not items and len(chunk) < need and self._rewind:
                    # More calls follow: note where the batch began, so an interrupt in one of
                    # them can put the parent back (the elements are served again from replay).
                    k = len(chunk)
                    unread(parent, k)
                    before = parent.get_state()
                    chunk = []
                    while len(chunk) < k:
                        chunk += parent.next_chunk(k - len(chunk))
                items += chunk
                need -= len(chunk)
        except BaseException as e:
            if before is not None and not isinstance(e, Exception):
                parent.set_state(before)  # interrupted: continuing rebuilds this batch
            raise
        return stack_batch(items, self._batch_fn)

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

    def _expand(self, x: Any) -> list[Any]:
        raise NotImplementedError

    def _pull(self) -> None:
        """Expands the next parent element. On ``StopIteration`` (or an error) nothing changes, so
        the state after exhaustion still points at the last element and restores to exhaustion."""
        before = self._parent.get_state()
        pending = self._expand(next(self._parent))
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
            self._pending, self._taken = [], 0
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


class RebatchIterDataset(_OneParentIterDataset):
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

    def _expand(self, x):
        return [x, _leading_dim(x)]

    def _extra_state(self):
        return {"batch_size": self._bs}

    def _check_extra_state(self, state):
        _check_batch_size_field(state, self._bs)

    def __next__(self):
        pieces, need = [], self._bs
        while need:
            if not self._pending or self._taken >= self._pending[1]:
                try:
                    self._pull()
                except StopIteration:
                    if not pieces or self._drop:
                        raise
                    break
                continue
            batch, size = self._pending
            take = min(need, size - self._taken)
            lo = self._taken
            pieces.append(tree.map_structure(lambda a, lo=lo, take=take: a[lo : lo + take], batch))
            self._taken += take
            need -= take
        return pieces[0] if len(pieces) == 1 else tree.concatenate(pieces)


class LimitIterDataset(_OneParentIterDataset):
    """At most ``count`` elements of the parent."""

    def __init__(self, parent: IterDataset, count: int):
        super().__init__(parent)
        self._count = check_int(count, "LimitIterDataset count")

    def __iter__(self):
        return _LimitIterator(iter(self._parent), self._count)


class _LimitIterator(_OneParentIterator):
    kind = "LimitIterDataset"

    def __init__(self, parent, limit):
        super().__init__(parent)
        self._limit, self._count = limit, 0

    def __next__(self):
        if self._count >= self._limit:
            raise StopIteration
        x = next(self._parent)
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
    others = "argument 1" if i == 1 else f"arguments 1-{i}"
    return ValueError(
        f"ZipIterDataset argument {i + 1} is {why} than {others}; pass strict=False to stop at the "
        "shortest input."
    )


class _ZipIterator(DatasetIterator):
    def __init__(self, parents: Sequence[DatasetIterator], *, strict: bool = False):
        super().__init__(parents)
        self._strict = strict

    def __next__(self):
        items = []
        for i, p in enumerate(self._parents):
            try:
                items.append(next(p))
            except StopIteration:
                if not self._strict:
                    raise
                if i > 0:
                    raise _zip_length_error(i, "shorter") from None
                for j in range(1, len(self._parents)):
                    try:
                        next(self._parents[j])
                    except StopIteration:
                        continue
                    raise _zip_length_error(j, "longer") from None
                raise
        return tuple(items)

    def get_state(self):
        return _state.make_state("ZipIterDataset", parents=[p.get_state() for p in self._parents])

    def set_state(self, state):
        _state.expect_state(state, "ZipIterDataset", ("parents",))
        if len(state["parents"]) != len(self._parents):
            raise _state.StateMismatchError(
                f"zip state has {len(state['parents'])} parents, this pipeline has {len(self._parents)}."
            )
        with _state.rollback_on_error(self):
            for p, s in zip(self._parents, state["parents"]):
                p.set_state(s)


class RepeatIterDataset(_OneParentIterDataset):
    """The parent's elements ``num_epochs`` times (forever with ``None``), re-iterating the parent
    from its start for each epoch. An epoch that yields nothing ends the repetition (no busy loop)."""

    def __init__(self, parent: IterDataset, num_epochs: int | None = None):
        super().__init__(parent)
        self._epochs = None if num_epochs is None else check_int(
            num_epochs, "RepeatIterDataset: num_epochs", minimum=1
        )

    def __iter__(self):
        return _RepeatIterator(self._parent, self._epochs)


class _RepeatIterator(_OneParentIterator):
    kind = "RepeatIterDataset"

    def __init__(self, parent_ds: IterDataset, epochs: int | None):
        super().__init__(iter(parent_ds))
        self._parent_ds, self._limit, self._epoch, self._seen = parent_ds, epochs, 0, 0

    def _restart(self) -> None:
        self._parent.close()
        self._parent = iter(self._parent_ds)
        self._parents = (self._parent,)
        if self._options is not None:
            self._parent._apply_options(self._options)

    def __next__(self):
        while True:
            if self._limit is not None and self._epoch >= self._limit:
                raise StopIteration
            try:
                x = next(self._parent)
            except StopIteration:
                if not self._seen:  # an empty epoch: every later one is empty too
                    self._epoch = self._limit if self._limit is not None else self._epoch
                    raise
                self._epoch += 1
                self._seen = 0
                self._restart()
                continue
            self._seen += 1
            return x

    def _extra_state(self):
        return {"epoch": self._epoch, "seen": self._seen}

    def _set_extra_state(self, state):
        self._epoch, self._seen = int(state["epoch"]), int(state["seen"])
