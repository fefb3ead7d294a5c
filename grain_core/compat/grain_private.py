"""Grain's private helpers that public code imports and grain_core has no public name for.

The private-path table (:mod:`grain_core.compat.private_paths`) maps these Grain names here:

* :func:`even_split` (``grain._src.core.sharding``): the ``[start, end)`` interval of one shard of
  ``num_examples`` records, split as evenly as Grain 0.2.18 splits it.
* :func:`map_structure_up_to` (``grain._src.core.tree_lib``, older ``grain._src.core.tree``):
  Grain's function, the same with or without jax.
* :class:`HashableWeakRef` (``grain._src.python.dataset.stats``): a weak reference hashed and
  compared by the id of its object.
* :class:`RangeMapDataset` (``grain._src.python.dataset.transformations.source``): the dataset
  ``MapDataset.range`` makes in Grain, with its ``start``, ``stop`` and ``step`` attributes.
"""

from __future__ import annotations

import collections
import logging
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from grain_core.dataset.map_ops import SourceMapDataset
from grain_core.sharding import ShardOptions
from grain_core.sources import RangeDataSource
from grain_core.validation import check_instance, check_int

__all__ = ["HashableWeakRef", "RangeMapDataset", "even_split", "map_structure_up_to"]

_log = logging.getLogger(__name__)


def even_split(num_examples: int, options: ShardOptions) -> tuple[int, int]:
    """Shard ``options.shard_index`` of ``num_examples`` records as ``(start, end)`` (Grain's).

    Every shard gets ``num_examples // shard_count`` records; with ``drop_remainder=False`` the
    first ``num_examples % shard_count`` shards get one more each (the shards tile
    ``[0, num_examples)``), with ``drop_remainder=True`` the remainder is in no shard and a warning
    is logged, as Grain does.
    """
    num_examples = check_int(num_examples, "even_split num_examples", minimum=0)
    check_instance(options, ShardOptions, "even_split options")
    per_shard, unused = divmod(num_examples, options.shard_count)
    start = per_shard * options.shard_index
    end = start + per_shard
    if unused:
        if options.drop_remainder:
            _log.warning(
                "Dropping %d examples of %d examples (shard %d).",
                unused, num_examples, options.shard_count,
            )
        else:
            start += min(options.shard_index, unused)
            end += min(options.shard_index + 1, unused)
    return start, end


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def map_structure_up_to(shallow_structure: Any, f: Callable[[Any], Any], structure: Any) -> Any:
    """``f`` applied to each subtree of ``structure`` found at a leaf of ``shallow_structure``.

    Grain's rules: ``list``/``tuple`` nodes of ``shallow_structure`` pair with ``structure``'s
    items in order (extra items of the longer one are ignored); ``Mapping`` nodes take
    ``structure[key]`` for each of their keys; the result has ``shallow_structure``'s node types
    (namedtuples and ``defaultdict`` factories kept). Everything else is a leaf: ``f(subtree)``.
    """
    if isinstance(shallow_structure, (list, tuple)):
        items = [
            map_structure_up_to(a, f, b)
            for a, b in zip(shallow_structure, structure, strict=False)
        ]
        if _is_namedtuple(shallow_structure):
            return type(shallow_structure)(*items)
        return type(shallow_structure)(items)
    if isinstance(shallow_structure, Mapping):
        mapped = {k: map_structure_up_to(v, f, structure[k]) for k, v in shallow_structure.items()}
        if isinstance(shallow_structure, collections.defaultdict):
            tree: Any = type(shallow_structure)(shallow_structure.default_factory)
            tree.update(mapped)
            return tree
        rebuild: Any = type(shallow_structure)
        return rebuild(mapped)
    return f(structure)


class HashableWeakRef:
    """A weak reference to ``obj``: calling it gives ``obj`` (or ``None`` once it is gone); its hash
    is ``id(obj)`` and two are equal when they were made for the same id."""

    def __init__(self, obj: Any):
        self._obj_id = id(obj)
        self._weakref = weakref.ref(obj)

    def __call__(self) -> Any:
        return self._weakref()

    def __hash__(self) -> int:
        return self._obj_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashableWeakRef) and self._obj_id == other._obj_id


class RangeMapDataset(SourceMapDataset):
    """Grain's ``RangeMapDataset(start, stop=None, step=1)``: ``range(start, stop, step)`` as a
    ``MapDataset`` (``RangeMapDataset(n)`` is ``range(n)``), index modulo its length like every
    source. ``start``, ``stop`` and ``step`` are the range's."""

    def __init__(self, start: int, stop: int | None = None, step: int = 1):
        if stop is None:
            start, stop = 0, start
        super().__init__(RangeDataSource(start, stop, step))
        self.start = start
        self.stop = stop
        self.step = step

    def __str__(self) -> str:
        return f"RangeMapDataset(start={self.start}, stop={self.stop}, step={self.step})"
