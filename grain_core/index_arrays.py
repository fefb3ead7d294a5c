"""Integer index arrays: what the kernel and plugins do with the index arrays of ``__getitems__``
calls that NumPy makes costly."""

from __future__ import annotations

import numpy as np

__all__ = ["unique_ints"]


def unique_ints(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array: ``np.unique(values)`` without
    ``np.unique``, whose first call in a process imports ``numpy.ma`` (tens of milliseconds, paid
    again by every ``mp_prefetch`` worker process that reads a chunk across two epochs)."""
    out = np.sort(values, kind="stable")
    if out.size > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out
