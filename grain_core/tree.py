"""PyTree helpers that follow Grain's rules: JAX's pytree registry when jax is installed, Grain's
own fallback when it is not.

Grain 0.2.18's ``tree_lib`` uses ``jax.tree_util`` whenever jax can be imported, and a pure-Python
fallback otherwise. grain_core does the same, without importing jax itself:

* **jax installed** (:func:`mode` is ``"jax"``): the structure is JAX's. Once jax has been imported
  (by the user, by flax, by unpickling a registered class) every call goes to ``jax.tree_util``, so
  flax struct dataclasses, ``jax.tree_util.register_dataclass`` / ``register_pytree_node`` classes
  and anything else in the registry are nodes. Before that nothing can have been registered, and a
  pure-Python copy of JAX's built-in rules gives the same answer: ``None`` is an empty subtree;
  ``dict`` and ``defaultdict`` are nodes with their keys sorted (rebuilt in sorted order);
  ``OrderedDict`` keeps its order; ``list``, ``tuple`` and namedtuples are nodes; every other object,
  subclasses of ``dict``/``list``/``tuple`` and dataclasses included, is a leaf.
* **no jax** (``"fallback"``): Grain's fallback. Instances of ``list``/``tuple`` (subclasses and
  namedtuples too) and of any ``Mapping`` (insertion order; ``defaultdict`` keeps its factory) are
  nodes; everything else, ``None`` and dataclasses included, is a leaf.

Trees of different structures raise :class:`TreeStructureError` (a ``ValueError`` and a
``KeyError``, the two errors Grain raises in its two modes). Where Grain's fallback silently
truncates sequences of different lengths, this raises too.

:func:`stack` (the default batch function) and :func:`concatenate` work leaf by leaf, so a batch of
registered dataclasses is one dataclass of stacked arrays; their errors start with Grain's wording
``Expected all input elements to have the same structure but got:`` followed by
:func:`spec_like` of the elements, then which leaf differs and how.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import pprint
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "TreeStructureError",
    "assert_same_structure",
    "concatenate",
    "flatten",
    "flatten_with_path",
    "flatten_with_paths",
    "map_structure",
    "map_structure_with_path",
    "mode",
    "nbytes",
    "spec_like",
    "stack",
    "unflatten_as",
]

SAME_STRUCTURE = "Expected all input elements to have the same structure but got:"
"""Grain's wording for elements that cannot be batched together (client tests match on it)."""


class TreeStructureError(ValueError, KeyError):
    """Trees that should have one structure do not (a ``ValueError``, and a ``KeyError`` as Grain's
    jax-less fallback raises for mappings with different keys)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


_mode: str | None = None


def mode() -> str:
    """``"jax"`` when jax is installed (trees follow JAX's pytree registry), else ``"fallback"``
    (Grain's rules without jax). Decided once per process, without importing jax."""
    global _mode
    if _mode is None:
        try:
            found = importlib.util.find_spec("jax") is not None
        except (ImportError, ValueError):
            found = False
        _mode = "jax" if found else "fallback"
    return _mode


def _tree_util() -> Any:
    """``jax.tree_util`` once jax is imported (and the mode is ``"jax"``), else ``None``."""
    tu = sys.modules.get("jax.tree_util")
    if tu is None or getattr(tu, "tree_map", None) is None or mode() != "jax":
        return None
    return tu


# ----- one node: (keys, children, rebuild) or None for a leaf -----------------------------------


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _sorted_keys(d: Mapping) -> list:
    try:
        return sorted(d)
    except TypeError as e:
        raise ValueError("Comparator raised exception while sorting pytree dictionary keys.") from e


def _node_jax(x: Any) -> tuple[list, list, Callable[[list], Any]] | None:
    cls = type(x)
    if x is None:
        return [], [], lambda items: None
    if cls is list or cls is tuple:
        return list(range(len(x))), list(x), cls
    if cls is dict:
        keys = _sorted_keys(x)
        return keys, [x[k] for k in keys], lambda items, keys=keys: dict(zip(keys, items))
    if isinstance(x, tuple) and _is_namedtuple(x):
        return list(cls._fields), list(x), lambda items: cls(*items)
    if cls is collections.OrderedDict:
        keys = list(x)
        return keys, [x[k] for k in keys], lambda items, keys=keys: cls(zip(keys, items))
    if cls is collections.defaultdict:
        keys = _sorted_keys(x)
        factory = x.default_factory
        return keys, [x[k] for k in keys], lambda items, keys=keys: cls(factory, zip(keys, items))
    return None


def _node_fallback(x: Any) -> tuple[list, list, Callable[[list], Any]] | None:
    cls = type(x)
    if isinstance(x, (list, tuple)):
        if _is_namedtuple(x):
            return list(cls._fields), list(x), lambda items: cls(*items)
        return list(range(len(x))), list(x), cls
    if isinstance(x, Mapping):
        keys = list(x)
        if isinstance(x, collections.defaultdict):
            factory = x.default_factory
            return (
                keys,
                [x[k] for k in keys],
                lambda items, keys=keys: cls(factory, zip(keys, items)),
            )
        return keys, [x[k] for k in keys], lambda items, keys=keys: cls(zip(keys, items))
    return None


def _node(x: Any) -> tuple[list, list, Callable[[list], Any]] | None:
    return _node_jax(x) if mode() == "jax" else _node_fallback(x)


def _key_str(parent: Any, key: Any) -> str:
    if _is_namedtuple(parent):
        return f".{key}"
    if isinstance(parent, Mapping):
        return f"[{key!r}]"
    return f"[{key}]"


def _children_like(ref: Any, keys: list, other: Any, path: str) -> list:
    """``other``'s children at ``ref``'s keys; refuses a node of another kind or shape."""
    if mode() == "jax" and type(other) is not type(ref):
        raise TreeStructureError(
            f"Trees have different structures at {path or '<root>'}: {type(ref).__name__} vs "
            f"{type(other).__name__}."
        )
    if isinstance(ref, Mapping):
        if not isinstance(other, Mapping) or set(other) != set(keys):
            got = sorted(map(repr, other)) if isinstance(other, Mapping) else type(other).__name__
            raise TreeStructureError(
                f"Trees have different structures at {path or '<root>'}: keys "
                f"{sorted(map(repr, keys))} vs {got}."
            )
        return [other[k] for k in keys]
    if ref is None:
        if other is not None:
            raise TreeStructureError(
                f"Trees have different structures at {path or '<root>'}: None vs "
                f"{type(other).__name__}."
            )
        return []
    if not isinstance(other, (list, tuple)) or len(other) != len(keys):
        got = f"length {len(other)}" if isinstance(other, (list, tuple)) else type(other).__name__
        raise TreeStructureError(
            f"Trees have different structures at {path or '<root>'}: length {len(keys)} vs {got}."
        )
    return list(other)


def _map(fn: Callable[..., Any], trees: tuple, path: str, with_path: bool, is_leaf: Any) -> Any:
    first = trees[0]
    node = None if is_leaf is not None and is_leaf(first) else _node(first)
    if node is None:
        return fn(path or "<root>", *trees) if with_path else fn(*trees)
    keys, children, rebuild = node
    others = [_children_like(first, keys, t, path) for t in trees[1:]]
    out = []
    for i, key in enumerate(keys):
        sub = path + _key_str(first, key)
        out.append(_map(fn, (children[i], *(o[i] for o in others)), sub, with_path, is_leaf))
    return rebuild(out)


# ----- Grain's tree_lib functions ----------------------------------------------------------------


def map_structure(
    fn: Callable[..., Any], *trees: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """Applies ``fn`` leafwise over trees of the first tree's structure and rebuilds that structure
    (``jax.tree_util.tree_map`` with jax, Grain's fallback without)."""
    tu = _tree_util()
    if tu is not None:
        try:
            return tu.tree_map(fn, *trees, is_leaf=is_leaf)
        except ValueError as e:
            if type(e) is ValueError and _jax_structures_differ(tu, trees, is_leaf):
                raise TreeStructureError(str(e)) from e
            raise
    return _map(fn, trees, "", False, is_leaf)


def _jax_structures_differ(tu: Any, trees: tuple, is_leaf: Any) -> bool:
    treedef = tu.tree_structure(trees[0], is_leaf=is_leaf)
    for t in trees[1:]:
        try:
            treedef.flatten_up_to(t)
        except ValueError:
            return True
    return False


def map_structure_with_path(fn: Callable[..., Any], *trees: Any) -> Any:
    """Like :func:`map_structure`, ``fn(path, *leaves)`` with the leaf's path string (``['a'][0]``,
    ``.field``; ``<root>`` for a leaf tree)."""
    tu = _tree_util()
    if tu is not None:
        return tu.tree_map_with_path(lambda p, *xs: fn(tu.keystr(p) or "<root>", *xs), *trees)
    return _map(fn, trees, "", True, None)


def flatten_with_paths(tree: Any) -> list[tuple[str, Any]]:
    """``[(path, leaf), ...]`` in the structure's order; paths look like ``['image'][0]`` (``.name``
    for a namedtuple or dataclass field, ``<root>`` for a leaf tree)."""
    tu = _tree_util()
    if tu is not None:
        return [(tu.keystr(p) or "<root>", leaf) for p, leaf in tu.tree_flatten_with_path(tree)[0]]
    out: list[tuple[str, Any]] = []
    _map(lambda p, x: out.append((p, x)), (tree,), "", True, None)
    return out


def flatten(tree: Any) -> list[Any]:
    """The leaves of ``tree`` in the structure's order."""
    tu = _tree_util()
    if tu is not None:
        return tu.tree_leaves(tree)
    out: list[Any] = []
    _map(out.append, (tree,), "", False, None)
    return out


def flatten_with_path(tree: Any) -> list[tuple[tuple, Any]]:
    """Grain's ``flatten_with_path``: ``[(key_path, leaf), ...]`` (JAX key entries with jax, the
    raw keys and indices without)."""
    tu = _tree_util()
    if tu is not None:
        return tu.tree_flatten_with_path(tree)[0]
    out: list[tuple[tuple, Any]] = []

    def walk(prefix: tuple, x: Any) -> None:
        node = _node(x)
        if node is None:
            out.append((prefix, x))
            return
        keys, children, _ = node
        for k, c in zip(keys, children):
            walk((*prefix, k), c)

    walk((), tree)
    return out


def unflatten_as(structure: Any, flat_sequence: Sequence[Any]) -> Any:
    """A tree of ``structure``'s structure with the leaves of ``flat_sequence`` in order."""
    tu = _tree_util()
    if tu is not None:
        return tu.tree_unflatten(tu.tree_structure(structure), list(flat_sequence))
    leaves = iter(flat_sequence)
    return _map(lambda _: next(leaves), (structure,), "", False, None)


def assert_same_structure(a: Any, b: Any) -> None:
    """Raises :class:`TreeStructureError` unless ``a`` and ``b`` have one structure."""
    tu = _tree_util()
    if tu is not None:
        sa, sb = tu.tree_structure(a), tu.tree_structure(b)
        if sa != sb:
            raise TreeStructureError(f"Structures are not the same: a = {sa}, b = {sb}")
        return
    _map(lambda *_: None, (a, b), "", False, None)
    _map(lambda *_: None, (b, a), "", False, None)


def spec_like(structure: Any) -> Any:
    """Grain's ``spec_like``: the structure with each leaf replaced by ``type[shape]`` (arrays by
    ``dtype[shape]``); lists and tuples of one item type become ``container<type>[shape]``."""

    def is_leaf(x: Any) -> bool:
        return isinstance(x, (list, tuple)) and all(isinstance(i, type(x[0])) for i in x)

    def type_of(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            return x.dtype
        if isinstance(x, (list, tuple)) and all(isinstance(i, type(x[0])) for i in x):
            return f"{type(x).__name__}<{type(x[0]).__name__ if x else ''}>"
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            fields = {f.name: getattr(x, f.name) for f in dataclasses.fields(x)}
            return f"{type(x).__name__}\n{pprint.pformat(spec_like(fields))}"
        return type(x).__name__

    def shape_of(x: Any) -> Any:
        try:
            return list(np.asarray(x).shape)
        except ValueError:
            return "[unknown shape]"

    try:
        return map_structure(lambda x: f"{type_of(x)}{shape_of(x)}", structure, is_leaf=is_leaf)
    except (ValueError, TypeError):
        return f"{type(structure).__name__}"


# ----- batching ----------------------------------------------------------------------------------


def _same_structure_error(elements: Sequence[Any], op: str, detail: str) -> ValueError:
    try:
        spec = pprint.pformat(spec_like(list(elements)))
    except Exception:  # noqa: BLE001 -- the message must not hide the real error
        spec = f"{len(elements)} elements"
    return TreeStructureError(f"{SAME_STRUCTURE}\n{spec}\n{detail}")


def _diagnose(elements: Sequence[Any], op: str) -> str:
    """Which element's structure, or which leaf's shape, differs from element 0's."""
    try:
        ref = flatten_with_paths(elements[0])
    except ValueError as e:
        return f"Cannot {op} elements: {e}"
    ref_paths = [p for p, _ in ref]
    flat = []
    for i, element in enumerate(elements):
        try:
            got = flatten_with_paths(element)
        except ValueError as err:
            return f"Cannot {op} elements: element {i}: {err}"
        if [p for p, _ in got] != ref_paths:
            return (
                f"Cannot {op} elements with different structures: element 0 has leaves {ref_paths}, "
                f"element {i} has leaves {[p for p, _ in got]}."
            )
        flat.append(got)
    for j, path in enumerate(ref_paths):
        shapes = [np.shape(f[j][1]) for f in flat]
        if len(set(shapes)) > 1:
            where = next(i for i, s in enumerate(shapes) if s != shapes[0])
            return (
                f"Cannot {op} leaf {path}: element 0 has shape {shapes[0]} but element {where} has "
                f"shape {shapes[where]} (shapes seen: {sorted(set(shapes), key=str)}). Pad or crop "
                "elements to one shape first, or pass batch_fn=."
            )
    return f"Cannot {op} the elements."


def _leaf_op(op: str, np_fn: Callable[[Sequence[Any]], np.ndarray], elements: Sequence[Any]) -> Any:
    try:
        return map_structure(lambda *leaves: np_fn(leaves), *elements)
    except (ValueError, KeyError, IndexError) as e:
        detail = _diagnose(elements, op)
        if detail == f"Cannot {op} the elements.":
            detail = f"Cannot {op} the elements: {e}"
        raise _same_structure_error(elements, op, detail) from None


def _stack_leaves(leaves: Sequence[Any]) -> np.ndarray:
    if isinstance(leaves[0], bytes):
        # A fixed-width bytes dtype would drop trailing NUL bytes: keep the exact objects.
        out = np.empty(len(leaves), dtype=object)
        out[:] = list(leaves)
        return out
    return np.stack(leaves)


def stack(elements: Sequence[Any]) -> Any:
    """Stacks same-structured trees along a new leading axis, leaf by leaf (Grain's ``make_batch``).

    Array and number leaves become arrays with one more leading axis; ``bytes`` leaves become 1-D
    object arrays holding the exact ``bytes`` objects. Elements of different structures or leaf
    shapes raise :class:`TreeStructureError` with Grain's wording.
    """
    if not elements:
        raise ValueError("Cannot batch 0 values.")
    return _leaf_op("stack", _stack_leaves, elements)


def concatenate(elements: Sequence[Any]) -> Any:
    """Concatenates same-structured trees along their existing leading axis, leaf by leaf."""
    if not elements:
        raise ValueError("Cannot concatenate an empty sequence of elements.")
    return _leaf_op("concatenate", np.concatenate, elements)


# ----- sizes -------------------------------------------------------------------------------------

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
