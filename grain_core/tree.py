"""Minimal PyTree helpers: nested dicts, lists, tuples and namedtuples with array-like leaves.

JAX is not needed; the structure rules match ``jax.tree_util`` for those containers (``None`` is an
empty subtree).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["map_structure", "stack", "concatenate", "flatten_with_paths", "nbytes"]

_PLAIN = frozenset({int, float, bool, complex, type(None), str, bytes, bytearray})
_MAX_DEPTH = 8


def nbytes(element: Any, _depth: int = 0) -> int:
    """Approximate bytes ``element`` holds in memory: the one estimate grain_core uses to size
    chunks, bound what ``mp_prefetch`` workers run ahead, tune options and report sizes.

    * anything with an integer ``nbytes`` (numpy and JAX arrays, numpy scalars): that;
    * ``dict``, ``list``, ``tuple`` (namedtuples too) and dataclass instances: their own size
      (``sys.getsizeof``) plus their items', to a depth of 8 (deeper items count their own size);
    * anything else (Python scalars, ``str``, ``bytes``, other objects): ``sys.getsizeof``.

    Cheap for the common cases (a Python scalar or string is one lookup), since it runs once per element in
    a worker. Objects shared between elements are counted in each.
    """
    cls = type(element)
    if cls in _PLAIN:
        return sys.getsizeof(element)
    n = getattr(element, "nbytes", None)
    if n.__class__ is int:
        return n  # type: ignore[return-value]
    size = sys.getsizeof(element)
    if _depth >= _MAX_DEPTH:
        return size
    if cls is dict or isinstance(element, dict):
        return size + sum(nbytes(v, _depth + 1) for v in element.values())
    if cls is list or cls is tuple or isinstance(element, (list, tuple)):
        return size + sum(nbytes(v, _depth + 1) for v in element)
    if dataclasses.is_dataclass(element) and not isinstance(element, type):
        fields = dataclasses.fields(element)
        return size + sum(nbytes(getattr(element, f.name), _depth + 1) for f in fields)
    return size


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def flatten_with_paths(tree: Any, path: str = "") -> list[tuple[str, Any]]:
    """Returns ``[(path, leaf), ...]`` in a fixed order; paths look like ``['image'][0]``."""
    if isinstance(tree, dict):
        out = []
        for k in sorted(tree) if _sortable(tree) else tree:
            out.extend(flatten_with_paths(tree[k], f"{path}[{k!r}]"))
        return out
    if isinstance(tree, (list, tuple)):
        out = []
        for i, v in enumerate(tree):
            out.extend(flatten_with_paths(v, f"{path}[{i}]"))
        return out
    if tree is None:
        return []
    return [(path or "<root>", tree)]


def _sortable(d: dict) -> bool:
    try:
        sorted(d)
        return True
    except TypeError:
        return False


def map_structure(fn: Callable[..., Any], *trees: Any) -> Any:
    """Applies ``fn`` leafwise over trees of the same structure and rebuilds that structure."""
    first = trees[0]
    if isinstance(first, dict):
        return type(first)((k, map_structure(fn, *(t[k] for t in trees))) for k in first) if type(
            first
        ) is not dict else {k: map_structure(fn, *(t[k] for t in trees)) for k in first}
    if _is_namedtuple(first):
        return type(first)(*(map_structure(fn, *parts) for parts in zip(*trees)))
    if isinstance(first, (list, tuple)):
        return type(first)(map_structure(fn, *parts) for parts in zip(*trees))
    if first is None:
        return None
    return fn(*trees)


def _structure_error(elements: Sequence[Any], op: str) -> ValueError:
    ref = [p for p, _ in flatten_with_paths(elements[0])]
    for i, e in enumerate(elements[1:], 1):
        got = [p for p, _ in flatten_with_paths(e)]
        if got != ref:
            return ValueError(
                "Expected all input elements to have the same structure but got: element 0 has "
                f"leaves {ref}, element {i} has leaves {got} (cannot {op} elements with different "
                "structures)."
            )
    return ValueError(
        "Expected all input elements to have the same structure but got elements with different "
        f"structures (cannot {op} them)."
    )


def _leaf_op(op: str, np_fn: Callable[[Sequence[Any]], np.ndarray], elements: Sequence[Any]) -> Any:
    first = elements[0]
    if not isinstance(first, (dict, list, tuple)) and first is not None:
        try:
            return np_fn(elements)
        except ValueError as e:
            shapes = sorted({np.shape(x) for x in elements}, key=str)
            raise ValueError(
                f"Cannot {op} leaf <root>: elements have shapes {shapes}. "
                f"Pad or crop elements to one shape first, or pass batch_fn=. ({e})"
            ) from None
    try:
        return map_structure(lambda *leaves: np_fn(leaves), *elements)
    except (KeyError, TypeError, IndexError):
        raise _structure_error(elements, op) from None
    except ValueError:
        paths = flatten_with_paths(first)  # only to name the offending leaf
        flat = [flatten_with_paths(e) for e in elements]
        if any(len(f) != len(paths) for f in flat):
            raise _structure_error(elements, op) from None
        for j, (path, _) in enumerate(paths):
            shapes = [np.shape(f[j][1]) for f in flat]
            if len(set(shapes)) > 1:
                uniq = sorted(set(shapes), key=str)
                where = next(i for i, s in enumerate(shapes) if s != shapes[0])
                raise ValueError(
                    f"Cannot {op} leaf {path}: element 0 has shape {shapes[0]} but element "
                    f"{where} has shape {shapes[where]} (shapes seen: {uniq}). Pad or crop to one "
                    "shape first, or pass batch_fn=."
                ) from None
        raise


def _stack_leaves(leaves: Sequence[Any]) -> np.ndarray:
    if isinstance(leaves[0], bytes):
        # A fixed-width bytes dtype would drop trailing NUL bytes: keep the exact objects.
        out = np.empty(len(leaves), dtype=object)
        out[:] = list(leaves)
        return out
    return np.stack(leaves)


def stack(elements: Sequence[Any]) -> Any:
    """Stacks a sequence of same-structured PyTrees along a new leading axis, leafwise.

    Array and number leaves become arrays with one more leading axis; ``bytes`` leaves become 1-D
    object arrays holding the exact ``bytes`` objects.
    """
    if not elements:
        raise ValueError("Cannot stack an empty sequence of elements.")
    return _leaf_op("stack", _stack_leaves, elements)


def concatenate(elements: Sequence[Any]) -> Any:
    """Concatenates a sequence of same-structured PyTrees along their existing leading axis."""
    if not elements:
        raise ValueError("Cannot concatenate an empty sequence of elements.")
    return _leaf_op("concatenate", np.concatenate, elements)
