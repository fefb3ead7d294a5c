"""Element specs of the Hugging Face plugin's datasets, from the dataset's ``features`` (no row
read): what ``grain_core.experimental.get_element_spec`` answers for ``MapDataset.source(
HuggingFaceDataSource(ds))`` and ``HuggingFaceIterDataset(ds)``.

Rows in ``datasets``' numpy format (a map-style source with no format or ``"numpy"``, an iterable
dataset with ``with_format("numpy")``): numbers are scalars of their Arrow type (a ``ClassLabel``
int64), booleans bool, strings Python objects (``numpy.str_``), lists of numbers arrays of int64
or float32 (as ``datasets``' formatter casts them) with ``None`` for a length that varies, lists of
strings object arrays. Plain Python rows (an iterable dataset without a format): numbers int64 /
float64 / bool, strings objects; list columns give Python lists, whose length is part of the tree,
so they have no spec. Columns holding nulls give other values than their features say: the spec
assumes none. Anything else (images, audio, nested dicts, binaries, dates, other formats,
unknown features) raises ``NotImplementedError`` naming the column or format.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import grain_core as grain

__all__ = ["features_spec"]


def _unsupported(what: str) -> NotImplementedError:
    return NotImplementedError(
        f"Hugging Face element spec: {what} has no spec from its features (see "
        "grain_plugin_hf.specs); map the elements with a transform that has output_spec."
    )


def _leaf(feature: Any, column: str, numpy_rows: bool) -> tuple[tuple[int | None, ...], np.dtype]:
    import datasets

    if isinstance(feature, datasets.ClassLabel):
        return (), np.dtype(np.int64)
    if isinstance(feature, datasets.Value):
        name = str(feature.dtype)
        if name in ("string", "large_string"):
            return (), np.dtype(object)
        if name == "bool":
            return (), np.dtype(bool)
        if name.startswith(("int", "uint", "float")):
            if numpy_rows:
                return (), np.dtype(feature.pa_type.to_pandas_dtype())
            return (), np.dtype(np.int64 if name.startswith(("int", "uint")) else np.float64)
        raise _unsupported(f"column {column!r} ({name})")
    list_types = tuple(
        getattr(datasets, n) for n in ("List", "LargeList", "Sequence") if hasattr(datasets, n)
    )
    if isinstance(feature, list) and len(feature) == 1:
        inner, length = feature[0], None
    elif isinstance(feature, list_types) and not isinstance(getattr(feature, "feature", None), dict):
        inner = feature.feature
        length = getattr(feature, "length", -1)
        length = None if length is None or length < 0 else int(length)
    else:
        raise _unsupported(f"column {column!r} ({type(feature).__name__})")
    if not numpy_rows:
        raise _unsupported(f"list column {column!r} in plain Python rows (lists of any length)")
    shape, dtype = _leaf(inner, column, True)
    if dtype.kind in "iu":
        dtype = np.dtype(np.int64)
    elif dtype.kind == "f":
        dtype = np.dtype(np.float32)
    return (length, *shape), dtype


def features_spec(features: Any, columns: list[str] | None, fmt: Any) -> dict[str, Any]:
    """``{column: ShapeDtypeStruct}`` for rows of a dataset with ``features`` in format ``fmt``
    (``None`` or ``"numpy"``; ``"python"`` for plain Python rows of an iterable dataset).

    Raises:
      NotImplementedError: unknown features, another format, or a column without a spec.
    """
    if features is None:
        raise _unsupported("a dataset whose features are unknown (e.g. after map)")
    if fmt not in (None, "numpy", "python"):
        raise _unsupported(f"a dataset in the {fmt!r} format")
    names = list(features) if columns is None else columns
    out = {}
    for name in names:
        shape, dtype = _leaf(features[name], name, fmt != "python")
        out[name] = grain.experimental.ShapeDtypeStruct(shape=shape, dtype=dtype)
    return out
