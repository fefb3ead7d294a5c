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
from grain_core.dataset.chunking import can_unread
from grain_core.dataset.map_ops import stack_batch
from grain_core.dataset.prefetch import FilterRatioCheck
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
    e.add_note(f"raised in {where} while producing element #{position} (counted from 0)")


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
        if not self._chunked:
            self._unread = None  # type: ignore[assignment]  # see can_unread

    def _where(self) -> str:
        return _stage_name(self.kind, self._fn)

    def _call(self, x: Any, i: int) -> Any:
        raise NotImplementedError

    def __next__(self):
        if self._pending is not None:
            e, self._pending = self._pending, None
            raise e
        x = next(self._parent)
        i = self._count
        try:
            y = self._call(x, i)
        except BaseException as e:
            if not isinstance(e, Exception) and self._chunked:
                self._parent._unread(1)
            _error_note(e, self._where(), i)
            raise
        self._count = i + 1
        return y

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
            e, self._pending = self._pending, None
            raise e
        chunk = self._parent.next_chunk(max_elements)
        start = self._count
        out: list[Any] = []
        try:
            self._apply(chunk, start, out)
        except BaseException as e:
            done = out
            _error_note(e, self._where(), start + len(done))
            if isinstance(e, Exception) and done:
                self._parent._unread(len(chunk) - len(done) - 1)
                self._pending = e
                self._count = start + len(done) + 1
                return done
            if isinstance(e, Exception):
                self._parent._unread(len(chunk) - 1)
                self._count = start + 1
            else:
                self._parent._unread(len(chunk))
            raise
        self._count = start + len(out)
        return out

    def _unread(self, count: int) -> None:
        if self._pending is not None:  # the failing element is read again too
            self._pending = None
            count += 1
        self._parent._unread(count)
        self._count -= count

    def _set_extra_state(self, state):
        self._pending = None
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
        self._parent._unread(count)

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)


class SeedIterDataset(_OneParentIterDataset):
    """Passes elements through; sets the pipeline seed for downstream random transformations."""

    def __init__(self, parent: IterDataset, seed: int):
        super().__init__(parent)
        self._seed = _seeds.validate_seed(seed)
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
        if self._pending is not None:
            return super().__next__()
        x = next(self._parent)
        try:
            y = self._fn(x)
        except BaseException as e:
            if not isinstance(e, Exception) and self._chunked:
                self._parent._unread(1)
            _error_note(e, self._where(), self._count)
            raise
        self._count += 1
        return y

    def _apply(self, chunk, start, out):
        fn = self._fn
        append = out.append
        for x in chunk:
            append(fn(x))


class RandomMapIterDataset(_OneParentIterDataset):
    """``transform(element, rng)`` with ``rng = element_rng(seed, number of elements before it)``."""

    def __init__(self, parent: IterDataset, transform: Any, seed: int | None = None):
        super().__init__(parent)
        self._transform = transform
        self._fn = as_callable(transform, tr.RandomMap, "random_map()")
        self._seed = self._resolve_seed(seed)

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

    def _call(self, x, i):
        return self._fn(x, self._rngs(i))

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
    :class:`_ChunkedOneToOne` for what an exception from ``fn`` leaves behind)."""

    kind = "FilterIterDataset"
    _CHECK_EVERY = 256

    def __init__(self, parent, fn):
        super().__init__(parent)
        self._fn = fn
        self._check = FilterRatioCheck("filter()")
        self._seen = 0
        self._dropped = 0
        self._tested = 0  # parent elements tested (for error messages)
        self._chunked = can_unread(parent)
        self._last: tuple[int, list[Any]] = (0, [])  # (parent elements read, their verdicts)
        self._pending: BaseException | None = None
        if not self._chunked:
            self._unread = None  # type: ignore[assignment]  # see can_unread

    def __next__(self):
        if self._pending is not None:
            e, self._pending = self._pending, None
            raise e
        fn, parent = self._fn, self._parent
        while True:
            x = next(parent)
            self._seen += 1
            if self._seen >= self._CHECK_EVERY:
                self._flush()
            try:
                keep = fn(x)
            except BaseException as e:
                if not isinstance(e, Exception) and self._chunked:
                    parent._unread(1)
                    self._seen -= 1
                _error_note(e, _stage_name(self.kind, fn), self._tested)
                raise
            self._tested += 1
            if keep:
                self._last = (1, [True])
                return x
            self._dropped += 1

    def next_chunk(self, max_elements: int) -> list[Any]:
        if not self._chunked:
            return [self.__next__()]
        if self._pending is not None:
            e, self._pending = self._pending, None
            raise e
        fn, parent = self._fn, self._parent
        while True:
            chunk = parent.next_chunk(max_elements)
            verdicts: list[Any] = []
            append = verdicts.append
            try:
                for x in chunk:
                    append(fn(x))
            except BaseException as e:
                k = len(verdicts)
                _error_note(e, _stage_name(self.kind, fn), self._tested + k)
                kept = list(itertools.compress(chunk, verdicts))
                if isinstance(e, Exception):
                    self._tested += k + 1
                    self._count_seen(k + 1, k + 1 - len(kept))
                    if kept:
                        parent._unread(len(chunk) - k - 1)
                        self._pending = e
                        self._last = (k + 1, verdicts)
                        return kept
                    parent._unread(len(chunk) - k - 1)
                else:
                    parent._unread(len(chunk))
                raise
            n = len(chunk)
            self._tested += n
            kept = list(itertools.compress(chunk, verdicts))
            self._count_seen(n, n - len(kept))
            if kept:
                self._last = (n, verdicts)
                return kept

    def _count_seen(self, seen: int, dropped: int) -> None:
        self._seen += seen
        self._dropped += dropped
        if self._seen >= self._CHECK_EVERY:
            self._flush()

    def _unread(self, count: int) -> None:
        """Moves the parent back to just after the element before the last ``count`` kept ones."""
        if count <= 0:
            return
        self._pending = None  # a failing element after them is tested again
        n, verdicts = self._last
        pos = len(verdicts)
        while count:
            pos -= 1
            if verdicts[pos]:
                count -= 1
        self._parent._unread(n - pos)
        self._last = (pos, verdicts[:pos])

    def _set_extra_state(self, state):
        self._pending = None

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

    def __next__(self):
        parent = self._parent
        need = self._bs
        items: list[Any] = []
        while need:
            try:
                chunk = parent.next_chunk(need)
            except StopIteration:
                if not items or self._drop:
                    raise
                break
            if len(chunk) > need:
                raise RuntimeError(
                    f"{type(parent).__name__}.next_chunk({need}) returned {len(chunk)} elements; "
                    "next_chunk must return at most max_elements."
                )
            items += chunk
            need -= len(chunk)
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
    """Tuples of the next element of each parent; stops when any parent stops."""

    def __init__(self, parents: Sequence[IterDataset]):
        parents = [_check_iter_parent(p, "ZipIterDataset") for p in parents]
        if not parents:
            raise ValueError("ZipIterDataset needs at least one dataset.")
        super().__init__(parents)

    def __iter__(self):
        return _ZipIterator([iter(p) for p in self._parents])


class _ZipIterator(DatasetIterator):
    def __next__(self):
        return tuple([next(p) for p in self._parents])

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
            num_epochs, "RepeatIterDataset num_epochs (or None)", minimum=1
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
