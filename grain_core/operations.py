"""Grain's legacy ``Operation``s (``grain.python.MapOperation``, ``BatchOperation``, ...).

An operation is a callable taking an iterator of :class:`~grain_core.records.Record` and returning
one. The four built-in operations behave as Grain's: each wraps the user function, returns records
whose metadata lost its ``record_key``, and re-raises a failing user function as ``ValueError``
chained to the original error. Applying one logs Grain's deprecation message through ``logging``
(logger ``grain_core.operations``).

New code should use the transformations of :mod:`grain_core.transforms`; :func:`as_transform`
gives the transformation equivalent to a built-in operation (``DataLoader`` uses it, so legacy
``operations=[BatchOperation(...)]`` lists keep working).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from grain_core import transforms as tr
from grain_core import tree
from grain_core.records import Record

__all__ = [
    "BatchOperation",
    "FilterOperation",
    "MapOperation",
    "Operation",
    "RandomMapOperation",
    "as_transform",
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
