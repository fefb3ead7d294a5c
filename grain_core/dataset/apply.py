"""``Dataset.apply``: dispatching transform objects to the matching dataset method."""

from __future__ import annotations

from typing import Any

from grain_core import transforms as tr
from grain_core.dataset.base import MapDataset
from grain_core.dataset.batch_ops import FlatMapIterDataset
from grain_core.dataset.map_ops import FlatMapMapDataset


def apply_transformations(ds: Any, transformations: Any) -> Any:
    """Applies one transform object or a sequence of them to ``ds`` in order.

    ``Map`` → ``map``, ``RandomMap`` → ``random_map``, ``MapWithIndex`` → ``map_with_index``,
    ``Filter`` → ``filter``, ``Batch`` → ``batch``, ``FlatMap`` → a flat-map stage. Anything else is a
    ``TypeError`` naming its position.
    """
    items = transformations if isinstance(transformations, (list, tuple)) else [transformations]
    for i, t in enumerate(items):
        kind = tr.kind_of(t)
        if kind is tr.Batch:
            ds = ds.batch(t.batch_size, drop_remainder=t.drop_remainder, batch_fn=t.batch_fn)
        elif kind is tr.FlatMap:
            flat = FlatMapMapDataset if isinstance(ds, MapDataset) else FlatMapIterDataset
            ds = flat(ds, t)
        elif kind is not None:  # map, random_map, map_with_index, filter: the method of that name
            ds = getattr(ds, tr.method_name(kind))(t)
        else:
            raise TypeError(
                f"apply(): transformation {i} is a {type(t).__name__}; expected a grain_core.transforms "
                "Map, RandomMap, MapWithIndex, Filter, FlatMap or Batch. Wrap plain functions in a "
                "Map subclass or call ds.map(fn)."
            )
    return ds
