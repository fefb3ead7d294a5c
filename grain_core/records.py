"""``Record`` and ``RecordMetadata``: what a sampler says about one position of the data stream."""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")

__all__ = ["Record", "RecordMetadata"]


@dataclasses.dataclass(slots=True)
class RecordMetadata:
    """Where a record sits in a sampler's stream.

    Attributes:
      index: the position in the sampler's stream (0, 1, 2, ... across epochs).
      record_key: the key of the record read from the data source at that position.
      rng: the per-record random generator (a pure function of the sampler's seed and ``index``),
        or None when the sampler has no seed.
    """

    index: int
    record_key: int | None = None
    rng: np.random.Generator | None = None

    def remove_record_key(self) -> RecordMetadata:
        """Returns a copy without ``record_key`` (for elements that no longer match one record)."""
        return RecordMetadata(self.index, None, self.rng)

    def __str__(self) -> str:
        return f"RecordMetadata(index={self.index}, record_key={self.record_key})"


@dataclasses.dataclass(slots=True)
class Record(Generic[T]):
    """A data element together with its metadata."""

    metadata: RecordMetadata
    data: Any
