"""Transformation base classes: subclass one and implement its method.

``Map.map(x)``, ``RandomMap.random_map(x, rng)``, ``MapWithIndex.map_with_index(i, x)``,
``Filter.filter(x) -> bool``, ``FlatMap.flat_map(x) -> Sequence`` (at most ``max_fan_out`` items) and
``Batch(batch_size, drop_remainder)``. Datasets accept these objects or plain callables; ``apply`` and
``DataLoader`` take lists of them.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "Batch",
    "DatasetSelectionMap",
    "Filter",
    "FilterTransform",
    "FlatMap",
    "FlatMapTransform",
    "Map",
    "MapTransform",
    "MapWithIndex",
    "MapWithIndexTransform",
    "RandomMap",
    "RandomMapTransform",
    "TfRandomMap",
    "TfRandomMapTransform",
    "Transformation",
    "Transformations",
    "transform_name",
]


class Map(abc.ABC):
    """A 1:1 transformation: ``map(element) -> element``."""

    @abc.abstractmethod
    def map(self, element: Any) -> Any: ...


class RandomMap(abc.ABC):
    """A 1:1 random transformation: ``random_map(element, rng) -> element``.

    ``rng`` is a ``np.random.Generator`` that is a pure function of the transformation's seed and the
    element's position; use it and nothing else for randomness.
    """

    @abc.abstractmethod
    def random_map(self, element: Any, rng: np.random.Generator) -> Any: ...


class TfRandomMapTransform(abc.ABC):
    """Accepted for compatibility; grain_core has no TensorFlow dependency and does not run it."""

    @abc.abstractmethod
    def np_random_map(self, element: Any, rng: np.random.Generator) -> Any: ...


class MapWithIndex(abc.ABC):
    """A 1:1 transformation that also sees the element's index: ``map_with_index(index, element)``."""

    @abc.abstractmethod
    def map_with_index(self, index: int, element: Any) -> Any: ...


class Filter(abc.ABC):
    """Keeps elements for which ``filter(element)`` is true."""

    @abc.abstractmethod
    def filter(self, element: Any) -> bool: ...


class FlatMap(abc.ABC):
    """A 1:N transformation: ``flat_map(element)`` returns at most ``max_fan_out`` elements."""

    max_fan_out: int = 1

    @abc.abstractmethod
    def flat_map(self, element: Any) -> Sequence[Any]: ...


@dataclasses.dataclass(frozen=True)
class Batch:
    """Groups ``batch_size`` consecutive elements, stacked along a new leading axis leafwise."""

    batch_size: int
    drop_remainder: bool = False
    batch_fn: Callable[[Sequence[Any]], Any] | None = None

    def __post_init__(self):
        check_batch_size(self.batch_size)
        check_batch_fn(self.batch_fn)


def check_batch_size(batch_size: object) -> int:
    """Returns ``batch_size`` if it is a positive int, else raises ``TypeError``/``ValueError``."""
    from grain_core.validation import check_int

    return check_int(batch_size, "batch_size", minimum=1)


def check_batch_fn(batch_fn: object) -> Callable[[Sequence[Any]], Any] | None:
    """Returns ``batch_fn`` if it is ``None`` or callable, else raises ``TypeError``."""
    if batch_fn is not None and not callable(batch_fn):
        raise TypeError(
            "batch_fn must be a callable taking the list of elements of one batch (or None to "
            f"stack them leafwise), got {type(batch_fn).__name__}."
        )
    return batch_fn


class DatasetSelectionMap(abc.ABC):
    """Maps an index of a mixed dataset to ``(dataset_index, index_within_that_dataset)``."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def __getitem__(self, index: int) -> tuple[int, int]: ...


# Grain's longer names for the same classes.
MapTransform = Map
RandomMapTransform = RandomMap
MapWithIndexTransform = MapWithIndex
FilterTransform = Filter
FlatMapTransform = FlatMap

TfRandomMap = TfRandomMapTransform

Transformation = Map | RandomMap | MapWithIndex | Filter | FlatMap | Batch
Transformations = Sequence[Transformation]


# --- the transform-kind table: the one home of "which kind is this object, what do we call" -------
# Kernel helpers (not in ``__all__``: ``grain.transforms`` keeps Grain's names). Every kernel module
# that asks which kind a transform is, or which method to call on it, asks here
# (tests/test_transform_kinds.py checks that no other module does its own isinstance test).


@dataclasses.dataclass(frozen=True)
class TransformKind:
    """One kind of transformation: its class and the method a pipeline calls on its objects.

    ``method`` is ``None`` for ``Batch``, which is data (a size and a function), not a method.
    """

    cls: type
    method: str | None


# In dispatch order: an object that is an instance of several kinds is of the first one here.
TRANSFORM_KINDS: tuple[TransformKind, ...] = (
    TransformKind(Batch, None),
    TransformKind(Map, "map"),
    TransformKind(RandomMap, "random_map"),
    TransformKind(MapWithIndex, "map_with_index"),
    TransformKind(Filter, "filter"),
    TransformKind(FlatMap, "flat_map"),
)
TRANSFORM_CLASSES: tuple[type, ...] = tuple(k.cls for k in TRANSFORM_KINDS)
_METHOD_OF: dict[type, str] = {k.cls: k.method for k in TRANSFORM_KINDS if k.method is not None}


def kind_of(obj: object) -> type | None:
    """The kind class (``Batch``, ``Map``, ``RandomMap``, ``MapWithIndex``, ``Filter`` or
    ``FlatMap``) of a transform object, first match in :data:`TRANSFORM_KINDS` order; ``None``
    for anything else (a plain callable, a legacy operation, bad input)."""
    for kind in TRANSFORM_KINDS:
        if isinstance(obj, kind.cls):
            return kind.cls
    return None


def is_transform(obj: object) -> bool:
    """Whether ``obj`` is an object of one of the transform kinds (not a plain callable)."""
    return isinstance(obj, TRANSFORM_CLASSES)


def is_kind(obj: object, *kinds: type) -> bool:
    """Whether ``obj`` is an instance of any of ``kinds`` (classes of :data:`TRANSFORM_KINDS`)."""
    for kind in kinds:
        if kind not in TRANSFORM_CLASSES:
            raise ValueError(
                f"{kind!r} is not a transform kind; expected one of {TRANSFORM_CLASSES}."
            )
    return isinstance(obj, kinds)


def method_name(kind: type) -> str:
    """The name of the method a pipeline calls on a transform of ``kind`` (``Batch`` has none:
    ``KeyError``)."""
    return _METHOD_OF[kind]


def transform_name(transform: Any) -> str:
    """A readable name for a transform object or callable, for reprs and errors."""
    if is_transform(transform):
        return type(transform).__name__
    name = getattr(transform, "__qualname__", None) or getattr(transform, "__name__", None)
    return name or type(transform).__name__


def __getattr__(name: str) -> Any:
    """A misspelled transform name says which one was probably meant."""
    from grain_core.suggest import did_you_mean

    raise AttributeError(
        f"module {__name__!r} has no attribute {name!r}.{did_you_mean(name, __all__)}"
    )
