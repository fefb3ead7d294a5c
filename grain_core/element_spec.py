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
  ``drop_remainder``) or ``None`` (the tree follows JAX's pytree registry, see
  :mod:`grain_core.tree`); a ``batch_fn`` implementing Grain's ``BatchFn`` protocol
  (``output_spec(input_spec, batch_size, drop_remainder)``, also through ``functools.partial``)
  answers itself; any other custom ``batch_fn`` raises ``NotImplementedError``;
* ``RebatchIterDataset``: each leaf's leading dimension becomes ``batch_size`` (Grain's rule, also
  without ``drop_remainder``); ``zip`` (``ZipMapDataset`` / ``ZipIterDataset``): the tuple of its
  parents' specs; ``flat_map``: the ``FlatMap`` transform's ``output_spec(input_spec)`` (the spec
  of one element it yields) if it has one, else ``NotImplementedError`` as in Grain;
* ``ElasticIterator``: batches of ``global_batch_size // shard_count`` of the dataset's elements;
* stages that do not change elements (shuffle, window shuffle, slice, filter, repeat, seed, options,
  ``to_iter_dataset``, prefetching, limit, cache, a worker's share) and mixtures and interleaves (the
  first input's spec) pass the parent's spec through; plugin stages answer through
  ``_element_spec`` (see ``docs/writing-plugins.md``);
* anything else raises ``NotImplementedError`` naming the stage.

``ds._element_spec`` (Grain's private hook, which Grain-style custom datasets read from their
parents) gives the same answer on every dataset.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from grain_core import tree
from grain_core.dataset import (
    base,
    batch_ops,
    filter_ops,
    iter_ops,
    map_ops,
    mixing,
    prefetch,
    reshape_ops,
)
from grain_core.dataset.base import IterDataset, MapDataset, builders
from grain_core.dataset.cache import CacheIterDataset
from grain_core.dataset.elastic_iterator import ElasticIterator
from grain_core.dataset.sequential import ContiguousShareMapDataset
from grain_core.validation import check_instance

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
    filter_ops.FilterIterDataset,
    batch_ops.LimitIterDataset,
    reshape_ops.RepeatIterDataset,
    prefetch.PrefetchIterDataset,
    CacheIterDataset,
    ContiguousShareMapDataset,
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
_BATCHES: tuple[type, ...] = (map_ops.BatchMapDataset, batch_ops.BatchIterDataset)
_ZIPS: tuple[type, ...] = (map_ops.ZipMapDataset, reshape_ops.ZipIterDataset)
_FLAT_MAPS: tuple[type, ...] = (map_ops.FlatMapMapDataset, batch_ops.FlatMapIterDataset)


def _batched(spec: Any, size: int | None) -> Any:
    return tree.map_structure(
        lambda leaf: ShapeDtypeStruct(shape=(size, *leaf.shape), dtype=leaf.dtype), spec
    )


def _batch_spec(stage: Any, input_spec: Callable[[], Any]) -> Any:
    fn = stage._batch_fn
    if fn is None:
        return _batched(input_spec(), stage._bs if stage._drop else None)
    inner = fn.func if isinstance(fn, functools.partial) else fn
    output_spec = getattr(inner, "output_spec", None)
    if output_spec is None:
        raise NotImplementedError(
            "Element spec inference is not supported with custom batching functions. Give the "
            "batch_fn an `output_spec(self, input_spec, batch_size, drop_remainder)` method "
            "(Grain's BatchFn protocol)."
        )
    return output_spec(input_spec(), stage._bs, stage._drop)


def _rebatched(spec: Any, size: int) -> Any:
    def replace(leaf: Any) -> Any:
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return leaf
        return type(leaf)(shape=(size, *tuple(leaf.shape)[1:]), dtype=leaf.dtype)

    return tree.map_structure(replace, spec)


def _is_pass_through(ds: Any) -> bool:
    if isinstance(ds, _PASS_THROUGH):
        return True
    # Runtime stages (thread / process / multithread prefetch) change where elements are made,
    # never what they are; they mark themselves by module.
    return type(ds).__module__.startswith("grain_core.runtime.")


def get_element_spec(ds: MapDataset | IterDataset) -> Any:
    """The PyTree of :class:`ShapeDtypeStruct` of ``ds``'s elements (see the module docstring)."""
    check_instance(
        ds,
        (MapDataset, IterDataset),
        "get_element_spec",
        verb="expects",
        expected="a MapDataset or IterDataset",
    )
    if type(ds)._element_spec is not _INFERRED:
        return ds._element_spec  # a dataset answering for itself (Grain's hook)
    return _infer(ds)


def _infer(ds: Any) -> Any:
    stage: Any = ds  # stage classes' own fields are read below
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
        return output_spec(get_element_spec(stage.parents[0]))
    if isinstance(ds, _BATCHES):
        return _batch_spec(stage, lambda: get_element_spec(stage.parents[0]))
    if isinstance(ds, reshape_ops.RebatchIterDataset):
        return _rebatched(get_element_spec(stage.parents[0]), stage._bs)
    if isinstance(ds, _ZIPS):
        return tuple(get_element_spec(p) for p in stage.parents)
    if isinstance(ds, _FLAT_MAPS):
        output_spec = getattr(stage._transform, "output_spec", None)
        if output_spec is None:
            raise NotImplementedError(
                f"`element_spec` inference is not implemented for {type(ds).__name__}: give the "
                "FlatMap transform an `output_spec(self, input_spec)` method returning the spec of "
                "one element it yields."
            )
        return output_spec(get_element_spec(stage.parents[0]))
    if isinstance(ds, ElasticIterator):
        size = stage._global_batch_size // stage._shard_options.shard_count
        return _batched(get_element_spec(stage.parents[0]), size)
    if isinstance(ds, _FIRST_INPUT) or (_is_pass_through(ds) and len(stage.parents) == 1):
        return get_element_spec(stage.parents[0])
    raise NotImplementedError(
        f"`element_spec` inference is not implemented for {type(ds).__name__}."
    )


builders.infer_element_spec = _infer
_INFERRED = base._inferred_element_spec()


def int64_scalar() -> ShapeDtypeStruct:
    """The spec of one integer element (``MapDataset.range``)."""
    return ShapeDtypeStruct(shape=(), dtype=np.int64)
