"""Grain 0.2.18's tree_lib unit tests, ported to ``grain_core.tree`` (plain pytest), run with JAX's
rules (jax installed; both before jax is imported, emulated, and through ``jax.tree_util``) and
with Grain's jax-less fallback.

Ported from ``grain/_src/core/tree_lib_test.py`` (``TreeTest``: map_structure,
map_structure_with_path, assert_same_structure, flatten, flatten_with_path, unflatten_as,
spec_like and its class / list / dataclass / unknown-shape cases) and
``grain/_src/core/tree_lib_jax_test.py`` (``test_map_custom_tree``). Not ported: the attrs cases
and ``estimate_byte_size`` (grain_core's byte estimate is ``grain_core.tree.nbytes``).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from grain_core import tree

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["jax", "jax_emulated", "fallback"])
def mode(request, monkeypatch):
    if request.param == "jax_emulated":
        monkeypatch.setattr(tree, "_tree_util", lambda: None)
    elif request.param == "fallback":
        monkeypatch.setattr(tree, "_mode", "fallback")
    return request.param


@dataclasses.dataclass
class _TestClass:
    a: int
    b: str


class MyClass:
    def __init__(self, c):
        self.c = c


def test_map_structure(mode):
    assert tree.map_structure(lambda x: x + 1, ({"B": 10, "A": 20}, [1, 2], 3)) == (
        {"B": 11, "A": 21},
        [2, 3],
        4,
    )


def test_map_structure_with_path(mode):
    assert tree.map_structure_with_path(
        lambda path, x: x if path else None, {"B": "v1", "A": "v2"}
    ) == {
        "B": "v1",
        "A": "v2",
    }


def test_assert_same_structure(mode):
    tree.assert_same_structure({"B": "v1", "A": "v2"}, {"B": 10, "A": 20})
    with pytest.raises(ValueError):
        tree.assert_same_structure({"B": "v1"}, {"A": 1})


def test_flatten(mode):
    assert tree.flatten({"A": "v2", "B": "v1"}) == ["v2", "v1"]


def test_flatten_with_path(mode):
    result = tree.flatten_with_path({"A": "v2", "B": "v1"})
    result = [(tuple(getattr(k, "key", k) for k in path), leaf) for path, leaf in result]
    assert result == [(("A",), "v2"), (("B",), "v1")]


def test_unflatten_as(mode):
    assert tree.unflatten_as({"A": "v2", "B": "v1"}, [1, 2]) == {"A": 1, "B": 2}


@pytest.mark.parametrize(
    "structure, expected",
    [
        (
            {"A": "v2", "B": 1232.4, "C": np.ndarray([1, 2, 3])},
            {"A": "str[]", "B": "float[]", "C": "float64[1, 2, 3]"},
        ),
        (
            {"A": "v2", "B": {"C": np.ndarray([1, 2, 3])}},
            {"A": "str[]", "B": {"C": "float64[1, 2, 3]"}},
        ),
        (np.ndarray([1, 2, 3]), "float64[1, 2, 3]"),
    ],
    ids=["simple", "nested", "leaf"],
)
def test_spec_like(mode, structure, expected):
    assert tree.spec_like(structure) == expected


def test_spec_like_with_class_list_dataclass_and_unknown_shape(mode):
    assert tree.spec_like({"B": 1232.4, "C": MyClass(1)}) == {"B": "float[]", "C": "MyClass[]"}
    assert tree.spec_like(
        {"B": 1232.4, "C": [_TestClass(a=1, b="v2"), _TestClass(a=2, b="v2")]}
    ) == {
        "B": "float[]",
        "C": "list<_TestClass>[2]",
    }
    assert tree.spec_like(_TestClass(a=1, b="v2")) == "_TestClass\n{'a': 'int[]', 'b': 'str[]'}[]"
    assert tree.spec_like({"B": [np.zeros([2]), np.zeros([1])], "C": []}) == {
        "B": "list<ndarray>[unknown shape]",
        "C": "list<>[0]",
    }


class MyTree:
    def __init__(self, a, b):
        self.a = a
        self.b = b

    def __eq__(self, other):
        return self.a == other.a and self.b == other.b


jax.tree_util.register_pytree_node(
    MyTree, lambda t: ((t.a, t.b), None), lambda _, args: MyTree(*args)
)


def test_map_custom_tree():
    assert tree.mode() == "jax"
    assert tree.map_structure(lambda x: x + 1, MyTree(1, 2)) == MyTree(2, 3)
