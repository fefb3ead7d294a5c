"""``RangeDataSource``: integers with Python ``range`` semantics, read singly or in bulk."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

import grain_core as grain
from grain_core.author import check_indices


class RangeDataSource(grain.sources.RandomAccessDataSource[int]):
    """The integers of ``range(start, stop, step)`` as a random-access source."""

    #: ``__getitems__`` reads an int64 key array as it is (``MapDataset.source`` then hands it
    #: one instead of a list of Python ints).
    getitems_takes_arrays = True

    def __init__(self, start: int, stop: int, step: int = 1):
        self._range = range(operator.index(start), operator.index(stop), operator.index(step))

    @property
    def start(self) -> int:
        return self._range.start

    @property
    def stop(self) -> int:
        return self._range.stop

    @property
    def step(self) -> int:
        return self._range.step

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, record_key) -> int:
        return self._range[operator.index(record_key)]

    def __getitems__(self, record_keys: Sequence[int]) -> list[int]:
        n = len(self._range)
        keys = check_indices(record_keys, n, "RangeDataSource")
        if abs(self.start) + abs(self.step) * n < 2**62:
            return (self.start + keys * self.step).tolist()
        return [self._range[int(k)] for k in keys]

    def __iter__(self):
        return iter(self._range)

    @property
    def element_spec(self) -> grain.experimental.ShapeDtypeStruct:
        """Each record is a scalar int64 (what ``grain.experimental.get_element_spec`` reports)."""
        return grain.experimental.ShapeDtypeStruct(shape=(), dtype=np.int64)

    def __repr__(self) -> str:
        return f"RangeDataSource(start={self.start}, stop={self.stop}, step={self.step})"

    def __eq__(self, other) -> bool:
        return isinstance(other, RangeDataSource) and other._range == self._range

    def __hash__(self) -> int:
        return hash(self._range)


def range_dataset(start: int, stop: int | None = None, step: int = 1) -> grain.MapDataset[int]:
    """``MapDataset.range``: a dataset of ``range(start, stop, step)`` (``range(n)`` if one argument)."""
    if stop is None:
        start, stop = 0, start
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"MapDataset.range: {name} must be an int, got {type(v).__name__}.")
    if step == 0:
        raise ValueError("range() arg 3 must not be zero (MapDataset.range: step must not be zero).")
    return grain.MapDataset.source(RangeDataSource(start, stop, step))
