"""Fingerprints of ``MapDataset`` chains: what a ``to_iter_dataset`` state records to refuse a
state from a different pipeline, and what elastic restore rebuilds for other shards."""

from __future__ import annotations

from typing import Any

from grain_core import state as _state
from grain_core.dataset.base import MapDataset


def map_fingerprint_parts(ds: MapDataset) -> tuple[Any, ...]:
    """What :func:`map_fingerprint` digests: ``(class name, len, identifying fields, (parents' parts,
    ...))`` for ``ds`` and, recursively, its parents. Elastic restore builds these for other shards."""
    return (
        type(ds).__name__,
        len(ds),
        ds._fingerprint_fields(),
        tuple(map_fingerprint_parts(p) for p in ds.parents),
    )


def map_fingerprint(ds: MapDataset) -> str:
    """A digest of a ``MapDataset`` chain: stage classes, lengths and identifying fields."""
    return _state.fingerprint(map_fingerprint_parts(ds))
