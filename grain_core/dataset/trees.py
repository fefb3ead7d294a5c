"""Walking a pipeline: every dataset or iterator upstream of one, depth first (itself first).

Re-exported as ``grain_core.dataset.iterator_tree`` and ``grain_core.dataset.dataset_tree``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["dataset_tree", "iterator_tree"]


def iterator_tree(it: Any) -> Iterator[Any]:
    """Yields the ``DatasetIterator`` ``it`` and every iterator upstream of it, depth first."""
    yield it
    for p in getattr(it, "_parents", ()):
        yield from iterator_tree(p)


def dataset_tree(ds: Any) -> Iterator[Any]:
    """Yields the ``MapDataset``/``IterDataset`` ``ds`` and every dataset upstream of it, depth first."""
    yield ds
    for p in ds.parents:
        yield from dataset_tree(p)
