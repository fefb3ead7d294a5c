"""Element specs (Grain's ``grain.experimental.get_element_spec``, ``ShapeDtypeStruct``).

``get_element_spec(ds)`` returns the shape and dtype of the elements ``ds`` produces -- a PyTree of
:class:`ShapeDtypeStruct` -- without creating an iterator or reading any data. It is inferred
stage by stage from the source down, with Grain's rules:

* a dataset that defines ``_element_spec`` (Grain's hook, e.g. a user or plugin dataset) answers
  for itself; a ``MapDataset.source(src)`` whose source defines ``element_spec`` too
  (``MapDataset.range`` gives ``ShapeDtypeStruct((), int64)``);
* ``map`` / ``random_map`` / ``map_with_index``: the transform's ``output_spec(input_spec)``; a
  transform without it raises ``ValueError`` saying to implement it;
* ``batch`` with the default stacking: each leaf gets a leading dimension ``batch_size`` (with
  ``drop_remainder``) or ``None``; a custom ``batch_fn`` raises ``NotImplementedError``;
* stages that do not change elements (shuffle, slice, filter, repeat, seed, options,
  ``to_iter_dataset``, prefetching, limit, cache) and mixtures (the first input's spec) pass the
  parent's spec through;
* anything else raises ``NotImplementedError`` naming the stage.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Protocol

import numpy as np

from grain_core import tree
from grain_core.dataset import iter_ops, map_ops, mixing, prefetch
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.cache import CacheIterDataset

__all__ = ["ShapeDtypeStruct", "ShapeDtypeStructProtocol", "get_element_spec"]


@typing.runtime_checkable
class ShapeDtypeStructProtocol(Protocol):
    """Anything with a ``shape`` (``None`` for an unknown dimension) and a ``dtype``."""

    @property
    def shape(self) -> tuple[int | None, ...]: ...

    @property
    def dtype(self) -> Any: ...


@dataclasses.dataclass(slots=True, frozen=True)
class ShapeDtypeStruct:
    """The shape and dtype of one leaf of an element."""

    shape: tuple[int | None, ...]
    dtype: Any


_PASS_THROUGH: tuple[type, ...] = (
    map_ops.SeedMapDataset,
    map_ops.ShuffleMapDataset,
    map_ops.SliceMapDataset,
    map_ops.FilterMapDataset,
    map_ops.RepeatMapDataset,
    iter_ops.SeedIterDataset,
    iter_ops.WithOptionsIterDataset,
    iter_ops.FilterIterDataset,
    iter_ops.LimitIterDataset,
    iter_ops.RepeatIterDataset,
    prefetch.PrefetchIterDataset,
    CacheIterDataset,
)
_FIRST_INPUT: tuple[type, ...] = (
    mixing.MixedMapDataset,
    mixing.ConcatenateMapDataset,
    mixing.SelectionMapDataset,
    mixing.MixedIterDataset,
)
_MAPS: tuple[type, ...] = (
    map_ops.MapMapDataset,
    map_ops.RandomMapMapDataset,
    map_ops.MapWithIndexMapDataset,
    iter_ops.MapIterDataset,
    iter_ops.RandomMapIterDataset,
    iter_ops.MapWithIndexIterDataset,
)
_BATCHES: tuple[type, ...] = (map_ops.BatchMapDataset, iter_ops.BatchIterDataset)


def _is_pass_through(ds: Any) -> bool:
    if isinstance(ds, _PASS_THROUGH):
        return True
    # Runtime stages (thread / process / multithread prefetch) change where elements are made,
    # never what they are; they mark themselves by module.
    return type(ds).__module__.startswith("grain_core.runtime.")


def get_element_spec(ds: MapDataset | IterDataset) -> Any:
    """The PyTree of :class:`ShapeDtypeStruct` of ``ds``'s elements (see the module docstring)."""
    if not isinstance(ds, (MapDataset, IterDataset)):
        raise TypeError(
            f"get_element_spec expects a MapDataset or IterDataset, got {type(ds).__name__}."
        )
    stage: Any = ds  # stage classes' own fields are read below
    own = getattr(type(ds), "_element_spec", None)
    if own is not None:
        return ds._element_spec  # type: ignore[union-attr]
    if isinstance(ds, map_ops.SourceMapDataset):
        spec = getattr(ds.source, "element_spec", None)
        if spec is None:
            raise NotImplementedError(
                f"Element spec inference is not implemented for the source {type(ds.source).__name__}: "
                "give it an `element_spec` attribute (a PyTree of ShapeDtypeStruct)."
            )
        return spec
    if isinstance(ds, _MAPS):
        transform = stage._transform
        output_spec = getattr(transform, "output_spec", None)
        if output_spec is None:
            name = getattr(transform, "__qualname__", type(transform).__name__)
            raise ValueError(
                f"Cannot infer element spec for transform {name} because it does not implement "
                f"`output_spec` method. Implement `{name}.output_spec(self, input_spec: "
                "PyTree[ShapeDtypeStructProtocol]) -> PyTree[ShapeDtypeStructProtocol]` to enable "
                "element spec inference."
            )
        return output_spec(get_element_spec(ds.parents[0]))
    if isinstance(ds, _BATCHES):
        if stage._batch_fn is not None:
            raise NotImplementedError(
                "Element spec inference is not supported with custom batching functions."
            )
        size = stage._bs if stage._drop else None
        return tree.map_structure(
            lambda leaf: ShapeDtypeStruct(shape=(size, *leaf.shape), dtype=leaf.dtype),
            get_element_spec(ds.parents[0]),
        )
    if isinstance(ds, _FIRST_INPUT) or (_is_pass_through(ds) and len(ds.parents) == 1):
        return get_element_spec(ds.parents[0])
    raise NotImplementedError(
        f"`element_spec` inference is not implemented for {type(ds).__name__}."
    )


def int64_scalar() -> ShapeDtypeStruct:
    """The spec of one integer element (``MapDataset.range``)."""
    return ShapeDtypeStruct(shape=(), dtype=np.int64)
