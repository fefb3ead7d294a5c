"""Arrow columns -> rows of numpy values, as ``datasets``' numpy format returns them.

The fast path covers the column types whose numpy rows are simple to state exactly: numbers and
booleans (numpy scalars of the Arrow type), strings (``numpy.str_``), and lists of numbers nested to
any depth whose inner lists all have one length (one array per row: ``(n,)``, ``(n, w)``, ...; int64
for integers and float32 for floats, as ``datasets``' numpy formatter casts them). Anything else
(nulls, binaries, structs such as images, ragged inner lists, extension types) returns ``None`` and
the caller lets ``datasets`` format the rows itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["fast_feature", "rows_from_table"]


def fast_feature(feature: Any) -> bool:
    """Whether a ``datasets`` feature has a plain Arrow storage this module converts itself (no
    decoding step, no extension type)."""
    import datasets

    if isinstance(feature, datasets.ClassLabel):
        return True
    if isinstance(feature, datasets.Value):
        return feature.dtype not in ("binary", "large_binary", "null") and not str(
            feature.dtype
        ).startswith(("timestamp", "date", "time", "duration", "decimal"))
    inner = getattr(feature, "feature", None)
    list_types = tuple(
        getattr(datasets, name) for name in ("List", "LargeList", "Sequence") if hasattr(datasets, name)
    )
    if isinstance(feature, list) and len(feature) == 1:
        inner = feature[0]
    elif not isinstance(feature, list_types):
        return False
    if isinstance(inner, dict):  # Sequence({...}) is a dict of lists: datasets formats it itself
        return False
    return inner is not None and fast_feature(inner)


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _column(arr: pa.Array) -> Sequence[Any] | None:
    """Row values of one column, or None when this column needs ``datasets``' formatter."""
    if arr.null_count:
        return None
    t = arr.type
    if pa.types.is_boolean(t):  # datasets' numpy rows hold a bool as a 0-d array
        return [np.asarray(v) for v in arr.to_numpy(zero_copy_only=False)]
    if _numeric(t):
        return arr.to_numpy(zero_copy_only=False)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return arr.to_numpy(zero_copy_only=False).astype(np.str_)
    if not _is_list(t):
        return None
    # Walk the nesting: the outer offsets give each row's length; every inner level must be uniform.
    n = len(arr)
    starts = _offsets(arr)
    if starts is None:
        return None
    inner_shape: list[int] = []
    values = arr.flatten()
    while _is_list(values.type):
        if values.null_count:
            return None
        lengths = _lengths(values)
        if lengths is None or len(lengths) == 0:
            return None
        width = int(lengths[0])
        if not (lengths == width).all():
            return None  # ragged inner lists: datasets makes object arrays
        inner_shape.append(width)
        values = values.flatten()
    if not _numeric(values.type) or values.null_count:
        return None
    flat = values.to_numpy(zero_copy_only=False)
    # datasets' numpy format makes arrays int64 / float32 (scalars keep their Arrow type).
    if np.issubdtype(flat.dtype, np.integer):
        flat = flat.astype(np.int64)  # always a copy: writable, not Arrow's read-only buffer
    elif np.issubdtype(flat.dtype, np.floating):
        flat = flat.astype(np.float32)
    else:
        flat = np.array(flat)
    if inner_shape:
        if n and (np.diff(starts) == 0).any():
            return None  # an empty row of a nested column: datasets gives it another dtype
        flat = flat.reshape((-1, *inner_shape))
    bounds = starts.tolist()
    return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _offsets(arr: pa.Array) -> np.ndarray | None:
    """Row start positions (``n + 1`` of them, from 0) in ``arr.flatten()``."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return np.arange(len(arr) + 1, dtype=np.int64) * size
    offsets = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    return offsets - offsets[0]


def _lengths(arr: pa.Array) -> np.ndarray | None:
    if pa.types.is_fixed_size_list(arr.type):
        return np.full(len(arr), arr.type.list_size, dtype=np.int64)
    offsets = arr.offsets.to_numpy(zero_copy_only=False)
    return np.diff(offsets)


def rows_from_table(table: pa.Table, names: Sequence[str]) -> list[dict[str, Any]] | None:
    """The rows of ``table`` as dicts ``{name: numpy value}`` over ``names``, or None when a column
    needs ``datasets``' own formatter."""
    columns = []
    for name in names:
        chunked = table.column(name)
        arr = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
        values = _column(arr)
        if values is None:
            return None
        columns.append(values)
    if not columns:
        return [{} for _ in range(table.num_rows)]
    keys = list(names)
    return [dict(zip(keys, row)) for row in zip(*columns)]
