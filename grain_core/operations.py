"""Grain's legacy ``Operation``s (``grain.python.MapOperation``, ``BatchOperation``, ...).

An operation is a callable taking an iterator of :class:`~grain_core.records.Record` and returning
one. The four built-in operations behave as Grain's: each wraps the user function, returns records
whose metadata lost its ``record_key``, and re-raises a failing user function as ``ValueError``
chained to the original error. Applying one logs Grain's deprecation message through ``logging``
(logger ``grain_core.operations``).

New code should use the transformations of :mod:`grain_core.transforms`; :func:`as_transform`
gives the transformation equivalent to a built-in operation (``DataLoader`` uses it, so legacy
``operations=[BatchOperation(...)]`` lists keep working).

Custom operations (any other callable ``op(iterator of Record) -> iterator of Record``, Grain's
``Operation`` protocol) run in a ``DataLoader`` as in Grain: :func:`apply_on_records` applies the
whole operation list to a stream of :class:`~grain_core.records.Record` (each with its sampler
metadata: ``index``, ``record_key``, ``rng``), in order, in each worker when there are workers;
transforms see and produce the records' data, ``Batch`` / ``FlatMap`` outputs carry the (last)
record's metadata without ``record_key``, and the loader yields each final record's ``data``. Only
``BatchOperation`` becomes a ``Batch`` there (as in Grain); ``MapOperation`` and the other
built-in operations run as operations over the records.

A custom operation's stage (:class:`LegacyOperationIterDataset`) checkpoints exactly: its state is
the parent's state when the operation started plus the number of records it yielded; restoring
restarts the operation from that parent state and skips those records (so restoring costs a replay
of the operation's output since it started, and the operation must be deterministic).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast

import numpy as np

from grain_core import state as _state
from grain_core import transforms as tr
from grain_core import tree
from grain_core.dataset.base import IterDataset
from grain_core.dataset.batching import stack_batch
from grain_core.dataset.stages import OneParentIterator, OneParentIterDataset
from grain_core.records import Record
from grain_core.state import StateField

__all__ = [
    "BatchOperation",
    "FilterOperation",
    "MapOperation",
    "Operation",
    "LegacyOperationIterDataset",
    "RandomMapOperation",
    "apply_on_records",
    "as_transform",
    "is_custom_operation",
]

_IN = TypeVar("_IN")
_OUT = TypeVar("_OUT")
_log = logging.getLogger(__name__)


class Operation(Protocol):
    """A legacy operation: ``op(iterator of Record) -> iterator of Record``."""

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]: ...


def _deprecated(old: str, new: str) -> None:
    _log.error("Applying deprecated PyGrain %s. Please use the grain.python.%s.", old, new)


def _call(fn: Callable[..., Any], what: str, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:
        raise ValueError(f"PyGrain encountered an error when calling {what}.") from e


@dataclasses.dataclass
class MapOperation(Generic[_IN, _OUT]):
    """Applies ``map_function`` to each record's data."""

    map_function: Callable[[_IN], _OUT]

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]:
        _deprecated("MapOperation", "MapTransform")
        for r in input_iterator:
            data = _call(self.map_function, "map function", r.data)
            yield Record(r.metadata.remove_record_key(), data)


@dataclasses.dataclass
class RandomMapOperation(Generic[_IN, _OUT]):
    """Applies ``random_map_function(data, rng)`` with each record's ``metadata.rng``."""

    random_map_function: Callable[[_IN, np.random.Generator], _OUT]

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]:
        _deprecated("RandomMapOperation", "RandomMapTransform")
        for r in input_iterator:
            data = _call(self.random_map_function, "random map function", r.data, r.metadata.rng)
            yield Record(r.metadata.remove_record_key(), data)


@dataclasses.dataclass
class FilterOperation(Generic[_IN]):
    """Keeps the records whose data satisfies ``condition_function``."""

    condition_function: Callable[[_IN], bool]

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]:
        _deprecated("FilterOperation", "FilterTransform")
        for r in input_iterator:
            if _call(self.condition_function, "condition function", r.data):
                yield Record(r.metadata.remove_record_key(), r.data)


def _check_same_structure(values: Sequence[Any]) -> None:
    ref = [p for p, _ in tree.flatten_with_paths(values[0])]
    bad = [
        i for i, v in enumerate(values[1:], 1) if [p for p, _ in tree.flatten_with_paths(v)] != ref
    ]
    if bad:
        raise TypeError(
            f"Record structures do not match. Record at position 0 has structure {values[0]}, "
            f"while records at positions {bad} have structures {[values[i] for i in bad]}."
        )


@dataclasses.dataclass
class BatchOperation(Generic[_IN, _OUT]):
    """Groups ``batch_size`` consecutive records; the batch's metadata is the last record's.

    Without ``batch_fn`` the records' data (PyTrees of one structure) are stacked leafwise into numpy
    arrays; records of different structures raise ``TypeError`` naming their positions.
    """

    batch_size: int
    drop_remainder: bool = False
    batch_fn: Callable[[Sequence[_IN]], _OUT] | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or self.batch_size <= 0
        ):
            raise ValueError(f"batch_size must be a positive integer. Got {self.batch_size}.")
        tr.check_batch_fn(self.batch_fn)
        self._show_deprecation = True

    def disable_deprecation_message(self) -> None:
        """Stops logging the deprecation message when applied."""
        self._show_deprecation = False

    def _batch(self, values: list[Any]) -> Any:
        if self.batch_fn is not None:
            return self.batch_fn(values)
        _check_same_structure(values)
        return tree.stack(values)

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]:
        if self._show_deprecation:
            _deprecated("BatchOperation", "Batch transformation")
        values: list[Any] = []
        last = None
        for r in input_iterator:
            last = r.metadata
            values.append(r.data)
            if len(values) == self.batch_size:
                yield Record(last.remove_record_key(), self._batch(values))
                values = []
        if values and not self.drop_remainder and last is not None:
            yield Record(last.remove_record_key(), self._batch(values))


class _MapFn(tr.Map):
    def __init__(self, fn: Callable[[Any], Any]):
        self._fn = fn

    def map(self, element: Any) -> Any:
        return _call(self._fn, "map function", element)


class _RandomMapFn(tr.RandomMap):
    def __init__(self, fn: Callable[[Any, np.random.Generator], Any]):
        self._fn = fn

    def random_map(self, element: Any, rng: np.random.Generator) -> Any:
        return _call(self._fn, "random map function", element, rng)


class _FilterFn(tr.Filter):
    def __init__(self, fn: Callable[[Any], bool]):
        self._fn = fn

    def filter(self, element: Any) -> bool:
        return bool(_call(self._fn, "condition function", element))


def as_transform(op: Any) -> Any:
    """The ``grain_core.transforms`` object equivalent to a built-in legacy operation; any other
    object is returned unchanged."""
    if isinstance(op, BatchOperation):
        return tr.Batch(op.batch_size, drop_remainder=op.drop_remainder, batch_fn=op.batch_fn)
    if isinstance(op, MapOperation):
        return _MapFn(op.map_function)
    if isinstance(op, RandomMapOperation):
        return _RandomMapFn(op.random_map_function)
    if isinstance(op, FilterOperation):
        return _FilterFn(op.condition_function)
    return op


# --- custom operations in a DataLoader -----------------------------------------------------------


def is_custom_operation(op: Any) -> bool:
    """Whether ``op`` is a legacy operation that runs over records (a callable that is neither a
    transformation nor a ``BatchOperation``): a user's ``Operation`` or a built-in
    ``MapOperation`` / ``RandomMapOperation`` / ``FilterOperation``."""
    return callable(op) and not (tr.is_transform(op) or isinstance(op, BatchOperation))


class LegacyOperationIterDataset(OneParentIterDataset):
    """``operation(iterator of parent records)``: a legacy ``Operation`` as a pipeline stage (see
    the module docstring for its checkpoints)."""

    def __init__(self, parent: IterDataset, operation: Callable[[Iterator[Any]], Iterator[Any]]):
        if not callable(operation):
            raise TypeError(
                f"A legacy Operation must be callable on an iterator of Records, got "
                f"{type(operation).__name__}."
            )
        super().__init__(parent)
        self._operation = operation

    def __iter__(self):
        return _LegacyOperationIterator(self.parent.__iter__(), self._operation)

    def __str__(self) -> str:
        return f"LegacyOperationIterDataset({type(self._operation).__name__})"


class _LegacyOperationIterator(OneParentIterator):
    kind = "LegacyOperationIterDataset"

    def __init__(self, parent: Any, operation: Callable[[Iterator[Any]], Iterator[Any]]):
        super().__init__(parent)
        self._operation = operation
        self._name = type(operation).__name__
        self._start(parent.get_state(), 0)

    def _start(self, parent_state: Any, skip: int) -> None:
        self._parent_start = parent_state
        self._emitted = 0
        self._out = iter(self._operation(self.parent))
        for _ in range(skip):
            try:
                next(self._out)
            except StopIteration:
                raise _state.StateMismatchError(
                    f"{self.kind}: the state says the operation {self._name} yielded {skip} "
                    f"records, but replaying it from the saved position yields {self._emitted}: "
                    "the state comes from another pipeline, or the operation is not deterministic."
                ) from None
            self._emitted += 1

    def __next__(self):
        x = next(self._out)
        self._emitted += 1
        return x

    def get_state(self):
        return _state.make_state(
            self.kind, parent=self._parent_start, emitted=self._emitted, operation=self._name
        )

    def state_fields(self):
        return {
            "parent": StateField.parent(),
            "emitted": StateField.position(),
            "operation": StateField.identity(),
        }

    def restore_state(self, state):
        self.parent.set_state(state["parent"])
        self._start(state["parent"], int(state["emitted"]))


class _RecordMap(tr.Map):
    def __init__(self, op: tr.Map):
        self._op = op

    def map(self, element: Record) -> Record:
        return Record(element.metadata, self._op.map(element.data))


class _RecordRandomMap(tr.Map):
    def __init__(self, op: tr.RandomMap):
        self._op = op

    def map(self, element: Record) -> Record:
        m = element.metadata
        # As Grain: the sampler's rng as it is (None from an unseeded sampler).
        return Record(m, self._op.random_map(element.data, cast(np.random.Generator, m.rng)))


class _RecordMapWithIndex(tr.Map):
    def __init__(self, op: tr.MapWithIndex, shard_count: int):
        self._op = op
        self._count = shard_count

    def map(self, element: Record) -> Record:
        m = element.metadata  # the position in this shard's stream, as without custom operations
        return Record(m, self._op.map_with_index(m.index // self._count, element.data))


class _RecordFilter(tr.Filter):
    def __init__(self, op: tr.Filter):
        self._op = op

    def filter(self, element: Record) -> bool:
        return bool(self._op.filter(element.data))


class _RecordFlatMap(tr.FlatMap):
    def __init__(self, op: tr.FlatMap):
        self._op = op
        self.max_fan_out = op.max_fan_out

    def flat_map(self, element: Record) -> list[Record]:
        m = element.metadata.remove_record_key()
        return [Record(m, y) for y in self._op.flat_map(element.data)]


class _RecordBatchFn:
    def __init__(self, batch_fn: Callable[[Sequence[Any]], Any] | None):
        self._fn = batch_fn

    def __call__(self, records: Sequence[Record]) -> Record:
        data = stack_batch([r.data for r in records], self._fn)
        return Record(records[-1].metadata.remove_record_key(), data)


def _on_records(op: Any, shard_count: int) -> Any:
    if isinstance(op, BatchOperation):
        op = as_transform(op)
    kind = tr.kind_of(op)
    if kind is tr.Batch:
        return tr.Batch(op.batch_size, op.drop_remainder, _RecordBatchFn(op.batch_fn))
    if kind is tr.Map:
        return _RecordMap(op)
    if kind is tr.RandomMap:
        return _RecordRandomMap(op)
    if kind is tr.MapWithIndex:
        return _RecordMapWithIndex(op, shard_count)
    if kind is tr.Filter:
        return _RecordFilter(op)
    if kind is tr.FlatMap:
        return _RecordFlatMap(op)
    return None


def apply_on_records(ds: IterDataset, operations: Sequence[Any], shard_count: int = 1) -> IterDataset:
    """Applies ``operations`` (transformations and legacy operations, in order) to ``ds``, a
    dataset of :class:`Record`; returns a dataset of records (see the module docstring).
    ``shard_count`` turns a record's ``index`` into the position that ``MapWithIndex`` gets."""
    for op in operations:
        wrapped = _on_records(op, shard_count)
        ds = LegacyOperationIterDataset(ds, op) if wrapped is None else ds.apply(wrapped)
    return ds
