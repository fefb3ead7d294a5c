"""CPU-bound work for the runtime benchmarks, in a module worker processes can import by name."""

from __future__ import annotations

import numpy as np

_ANGLES = np.linspace(0.0, 1.0, 20_000)


def heavy(x: int) -> float:
    """A few hundred microseconds of single-threaded numpy work."""
    return float(np.sin(_ANGLES * (x % 97 + 1)).sum())


def heavy_chunk(bounds: tuple[int, int]) -> list[float]:
    """``heavy`` over ``range(*bounds)``."""
    lo, hi = bounds
    return [heavy(i) for i in range(lo, hi)]
