"""Whole window orders, in C where the plugin's optional accelerator is built, else with numpy.

:func:`window_tables` returns the same rows as :func:`grain_core.author.shuffle_tables` (Grain's
``index_shuffle`` permutation of each window); :data:`NATIVE` says which way they are computed.
The accelerator (``_window_orders``, built from ``_window_orders.c`` when the plugin is installed
where a C compiler and the Python headers are present) covers windows of up to 65,536 elements,
where the cipher block is 16 bits in every mode; it is about three times faster than numpy there,
which matters because computing Grain's orders is most of a window shuffle's cost for small
elements (``docs/transforms.md``, "What Grain's orders cost").
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import numpy as np

from grain_core.author import SHUFFLE_ROUNDS, shuffle_tables

__all__ = ["NATIVE", "NATIVE_MAX_WINDOW", "window_tables"]

_native: ModuleType | None
try:
    from grain_plugin_window_shuffle import _window_orders as _native
except ImportError:  # built without a C compiler: numpy computes the same orders
    _native = None

#: True where the C accelerator is built and used.
NATIVE: bool = _native is not None
#: The largest window the accelerator computes (larger ones use numpy).
NATIVE_MAX_WINDOW = 1 << 16


def window_tables(
    length: int,
    seeds: Sequence[int],
    rounds: int = SHUFFLE_ROUNDS,
    *,
    grain_exact: bool | None = None,
    native: bool | None = None,
) -> np.ndarray:
    """Grain's permutation of ``[0, length)`` for each of ``seeds`` (32-bit ints), as the rows of
    a ``(len(seeds), length)`` int64 array: ``shuffle_tables(length - 1, seeds, rounds,
    grain_exact=grain_exact)``. ``native`` picks the way (None: the accelerator where it is built
    and covers ``length``; True where it is not built raises ``RuntimeError``)."""
    use = NATIVE if native is None else native
    if use and _native is None:
        raise RuntimeError(
            "grain_plugin_window_shuffle was installed without its C accelerator (no C compiler "
            "or Python headers at install time); reinstall it where they are, or pass native=None."
        )
    if _native is None or not use or not 1 <= length <= NATIVE_MAX_WINDOW:
        return shuffle_tables(length - 1, seeds, rounds, grain_exact=grain_exact)
    out = np.empty((len(seeds), length), np.int64)
    _native.window_orders([int(s) for s in seeds], rounds, length, out)
    return out
