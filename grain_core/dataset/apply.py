"""``Dataset.apply``: dispatching transform objects to the matching dataset method."""

from __future__ import annotations

from typing import Any

from grain_core import transforms as tr
from grain_core.dataset.base import MapDataset
from grain_core.dataset.iter_ops import FlatMapIterDataset
from grain_core.dataset.map_ops import FlatMapMapDataset


def apply_transformations(ds: Any, transformations: Any) -> Any:
    """Applies one transform object or a sequence of them to ``ds`` in order.

    ``Map`` → ``map``, ``RandomMap`` → ``random_map``, ``MapWithIndex`` → ``map_with_index``,
    ``Filter`` → ``filter``, ``Batch`` → ``batch``, ``FlatMap`` → a flat-map stage. Anything else is a
    ``TypeError`` naming its position.
    """
    items = transformations if isinstance(transformations, (list, tuple)) else [transformations]
    for i, t in enumerate(items):
        if isinstance(t, tr.Batch):
            ds = ds.batch(t.batch_size, drop_remainder=t.drop_remainder, batch_fn=t.batch_fn)
        elif isinstance(t, tr.Map):
            ds = ds.map(t)
        elif isinstance(t, tr.RandomMap):
            ds = ds.random_map(t)
        elif isinstance(t, tr.MapWithIndex):
            ds = ds.map_with_index(t)
        elif isinstance(t, tr.Filter):
            ds = ds.filter(t)
        elif isinstance(t, tr.FlatMap):
            ds = FlatMapMapDataset(ds, t) if isinstance(ds, MapDataset) else FlatMapIterDataset(ds, t)
        else:
            raise TypeError(
                f"apply(): transformation {i} is a {type(t).__name__}; expected a grain_core.transforms "
                "Map, RandomMap, MapWithIndex, Filter, FlatMap or Batch. Wrap plain functions in a "
                "Map subclass or call ds.map(fn)."
            )
    return ds
