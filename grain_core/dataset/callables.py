"""Turns the transform argument of a dataset method into the callable it stands for."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grain_core import transforms as tr


def as_callable(transform: Any, kind: type, where: str) -> Callable[..., Any]:
    """Returns the function to call for ``transform``: the ``kind`` method of a transform object,
    or ``transform`` itself if it is a plain callable.

    Raises ``TypeError`` for a transform object of another kind or a non-callable, naming ``where``.
    """
    method = tr.method_name(kind)
    if tr.is_kind(transform, kind):
        return getattr(transform, method)
    other = tr.kind_of(transform)
    if other is not None:
        raise TypeError(
            f"{where} expects a {kind.__name__} transform or a callable, got a "
            f"{type(transform).__name__} (a {other.__name__} transform). Use the matching "
            "dataset method or pass the transform to apply()."
        )
    if kind is tr.RandomMap and hasattr(transform, "np_random_map"):
        return transform.np_random_map
    if not callable(transform):
        raise TypeError(
            f"{where} expects a {kind.__name__} transform or a callable, got "
            f"{type(transform).__name__}."
        )
    return transform
