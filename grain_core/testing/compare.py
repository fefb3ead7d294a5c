"""Element equality for PyTrees of numpy arrays, scalars, bytes and strings."""

from __future__ import annotations

from typing import Any

import numpy as np

from grain_core import tree


def elements_equal(a: Any, b: Any) -> bool:
    """True if ``a`` and ``b`` have the same structure and equal leaves (arrays: same dtype,
    shape and values, NaNs equal)."""
    pa, pb = tree.flatten_with_paths(a), tree.flatten_with_paths(b)
    if [p for p, _ in pa] != [p for p, _ in pb]:
        return False
    for (_, x), (_, y) in zip(pa, pb):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            x, y = np.asarray(x), np.asarray(y)
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
                return False
        elif x != y:
            return False
    return True


def assert_elements_equal(expected: list[Any], actual: list[Any], what: str) -> None:
    """Asserts two element lists are equal, naming the first differing position."""
    if len(expected) != len(actual):
        raise AssertionError(f"{what}: expected {len(expected)} elements, got {len(actual)}.")
    for i, (x, y) in enumerate(zip(expected, actual)):
        if not elements_equal(x, y):
            raise AssertionError(f"{what}: element {i} differs: expected {x!r}, got {y!r}.")
