"""Turns the transform argument of a dataset method into the callable it stands for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grain_core import transforms as tr

_METHOD_OF: dict[type, str] = {
    tr.Map: "map",
    tr.RandomMap: "random_map",
    tr.MapWithIndex: "map_with_index",
    tr.Filter: "filter",
    tr.FlatMap: "flat_map",
}


def as_callable(transform: Any, kind: type, where: str) -> Callable[..., Any]:
    """Returns the function to call for ``transform``: the ``kind`` method of a transform object,
    or ``transform`` itself if it is a plain callable.

    Raises ``TypeError`` for a transform object of another kind or a non-callable, naming ``where``.
    """
    method = _METHOD_OF[kind]
    if isinstance(transform, kind):
        return getattr(transform, method)
    if isinstance(transform, (*_METHOD_OF, tr.Batch)):
        raise TypeError(
            f"{where} expects a {kind.__name__} transform or a callable, got a "
            f"{type(transform).__name__} (a {_kind_of(transform)} transform). Use the matching "
            "dataset method or pass the transform to apply()."
        )
    if isinstance(kind, type) and kind is tr.RandomMap and hasattr(transform, "np_random_map"):
        return transform.np_random_map
    if not callable(transform):
        raise TypeError(
            f"{where} expects a {kind.__name__} transform or a callable, got "
            f"{type(transform).__name__}."
        )
    return transform


def _kind_of(transform: Any) -> str:
    for cls in (*_METHOD_OF, tr.Batch):
        if isinstance(transform, cls):
            return cls.__name__
    return type(transform).__name__
