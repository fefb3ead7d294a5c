"""Stacking elements into batches: one batch (:func:`stack_batch`), every batch of a chunk
(:func:`stack_batches`, what ``MapDataset.batch`` reads), and :func:`batch_and_pad`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from grain_core import transforms as tr
from grain_core import tree

__all__ = ["batch_and_pad", "stack_batch", "stack_batches"]


def stack_batch(elements: Sequence[Any], batch_fn: Callable[[Sequence[Any]], Any] | None) -> Any:
    """Stacks ``elements`` with ``batch_fn`` or, by default, leafwise along a new axis."""
    if batch_fn is not None:
        return batch_fn(elements)
    first = elements[0]
    if isinstance(first, (int, float, np.number)) and not isinstance(first, bool):
        try:
            return np.asarray(elements)
        except ValueError:
            pass
    return tree.stack(elements)


def batch_and_pad(values: Sequence[Any], *, batch_size: int, pad_value: Any = 0) -> Any:
    """Stacks ``values`` leafwise and pads the batch with ``pad_value`` rows up to ``batch_size``;
    pass it as ``batch_fn`` (with ``functools.partial``) to keep a smaller last batch at full shape
    instead of dropping it."""
    batch_size = tr.check_batch_size(batch_size)
    if not values:
        raise ValueError("Cannot batch 0 values.")
    if len(values) > batch_size:
        raise ValueError(f"batch_and_pad got {len(values)} values for batch_size={batch_size}.")
    stacked = stack_batch(values, None)
    missing = batch_size - len(values)
    if not missing:
        return stacked

    def pad(leaf: Any) -> np.ndarray:
        leaf = np.asarray(leaf)
        filler = np.full((missing, *leaf.shape[1:]), pad_value, dtype=leaf.dtype)
        return np.concatenate([leaf, filler])

    return tree.map_structure(pad, stacked)


def stack_batches(
    items: Sequence[Any], sizes: Sequence[int], batch_fn: Callable[[Sequence[Any]], Any] | None
) -> list[Any]:
    """``stack_batch`` of each run of ``sizes`` consecutive ``items`` (none of them ``None``, each
    size at least 1), in one loop: a run whose first element is a plain ``int`` or ``float`` goes
    straight to ``np.asarray``, which is what ``stack_batch`` does for it (same arrays, same
    dtypes), without a call and two type checks per batch."""
    out: list[Any] = []
    append, asarray, pos = out.append, np.asarray, 0
    for s in sizes:
        part = items[pos : pos + s]
        pos += s
        kind = type(part[0])
        if batch_fn is None and (kind is int or kind is float):
            try:
                append(asarray(part))
                continue
            except ValueError:
                pass
        append(stack_batch(part, batch_fn))
    return out
