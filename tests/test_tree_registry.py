"""Trees follow JAX's pytree registry when jax is installed, Grain's fallback without (issue 28 #3).

Expected outputs were recorded from google grain 0.2.18 with ``tests/grain_ported/record_tree_batching.py``
(run with and without jax importable); the recorder's output is written out in the tests below.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import subprocess
import sys
import textwrap
import typing

import jax
import numpy as np
import pytest

import grain_core as grain
from grain_core import tree
from grain_core.element_spec import ShapeDtypeStruct


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Pair:
    x: np.ndarray
    y: int


class Point(typing.NamedTuple):
    a: int
    b: np.ndarray


class Box:
    """A custom node registered with ``register_pytree_node``."""

    def __init__(self, items: dict):
        self.items = items

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and self.items.keys() == other.items.keys()


jax.tree_util.register_pytree_node(
    Box,
    lambda b: (list(b.items.values()), list(b.items)),
    lambda keys, children: Box(dict(zip(keys, children))),
)


def _batch(elements, kind):
    ds = grain.MapDataset.source(elements)
    if kind == "iter":
        ds = ds.to_iter_dataset()
    return list(ds.batch(len(elements)))[0]


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_registered_dataclass_batches_leaf_by_leaf(kind):
    out = _batch([Pair(np.arange(2), i) for i in range(3)], kind)
    assert type(out) is Pair
    np.testing.assert_array_equal(out.x, [[0, 1]] * 3)
    np.testing.assert_array_equal(out.y, [0, 1, 2])


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_custom_registered_node_and_namedtuple_batch(kind):
    out = _batch([Box({"u": i, "v": np.full(2, i)}) for i in range(3)], kind)
    assert type(out) is Box
    np.testing.assert_array_equal(out.items["u"], [0, 1, 2])
    np.testing.assert_array_equal(out.items["v"], [[0, 0], [1, 1], [2, 2]])
    nt = _batch([Point(i, np.ones(2)) for i in range(3)], kind)
    assert type(nt) is Point
    np.testing.assert_array_equal(nt.a, [0, 1, 2])


def test_dicts_come_back_with_sorted_keys_and_none_kept_as_in_grain_with_jax():
    out = _batch([{"b": i, "a": i, "n": None} for i in range(3)], "map")
    assert list(out) == ["a", "b", "n"] and out["n"] is None
    od = _batch([collections.OrderedDict(b=i, a=i) for i in range(3)], "map")
    assert type(od) is collections.OrderedDict and list(od) == ["b", "a"]


@pytest.mark.parametrize(
    "elements",
    [
        [{"a": np.ones(1)}, {"a": np.ones(2)}],  # ragged leaf
        [{"a": 1}, {"b": 2}],  # different keys
        [[1, 2], [3]],  # different lengths
    ],
)
def test_batch_errors_carry_grains_wording(elements):
    with pytest.raises(ValueError, match="Expected all input elements to have the same structure"):
        _batch(elements, "map")


def test_ragged_error_starts_with_grains_exact_message():
    # Recorded from google grain 0.2.18 (record_tree_batching.py): the message for three ragged
    # dict elements is exactly these two lines; grain_core adds a line naming the leaf after them.
    grains = "Expected all input elements to have the same structure but got:\n'list<dict>[3]'"
    with pytest.raises(ValueError) as info:
        _batch([{"a": np.ones(i + 1)} for i in range(3)], "map")
    assert str(info.value).startswith(grains + "\n")


def test_ragged_error_names_the_leaf_and_shapes():
    with pytest.raises(ValueError, match=r"leaf \['a'\]: element 0 has shape \(1,\)"):
        _batch([{"a": np.ones(1)}, {"a": np.ones(2)}], "iter")


def test_element_spec_of_a_batch_of_registered_dataclasses():
    class ToPair(grain.transforms.Map):
        def map(self, x):
            return Pair(np.full(2, x), x)

        def output_spec(self, spec):
            return Pair(ShapeDtypeStruct((2,), spec.dtype), spec)

    ds = grain.MapDataset.range(6).map(ToPair()).batch(3, drop_remainder=True)
    spec = grain.experimental.get_element_spec(ds)
    assert type(spec) is Pair
    assert spec.x.shape == (3, 2) and spec.y.shape == (3,)


# The pure-Python copy of JAX's built-in rules (used while jax is installed but not yet imported)
# must answer exactly what jax.tree_util answers.
_TREES = [
    {"b": 1, "a": [2, (3, None)], "c": {"z": 4, "y": 5}},
    collections.OrderedDict(b=1, a=2),
    collections.defaultdict(list, {"b": 1, "a": 2}),
    Point(1, np.zeros(2)),
    [None, (), [], {}],
    {"d": dataclasses.make_dataclass("D", ["f"])(1)},  # unregistered dataclass: a leaf
    type("MyDict", (dict,), {})(a=1),  # unregistered dict subclass: a leaf
    7,
]


@pytest.mark.parametrize("t", _TREES, ids=range(len(_TREES)))
def test_emulated_jax_rules_match_jax(t, monkeypatch):
    with_jax = (tree.flatten(t), tree.flatten_with_paths(t), tree.map_structure(lambda x: x, t))
    monkeypatch.setattr(tree, "_tree_util", lambda: None)
    assert tree.mode() == "jax"
    emulated = (tree.flatten(t), tree.flatten_with_paths(t), tree.map_structure(lambda x: x, t))
    assert [id(x) for x in emulated[0]] == [id(x) for x in with_jax[0]]
    assert [p for p, _ in emulated[1]] == [p for p, _ in with_jax[1]]
    assert type(emulated[2]) is type(with_jax[2])
    if isinstance(t, dict):
        assert list(emulated[2]) == list(with_jax[2])


def test_emulated_rules_refuse_different_structures(monkeypatch):
    monkeypatch.setattr(tree, "_tree_util", lambda: None)
    for a, b in [({"a": 1}, {"b": 1}), ([1, 2], [1]), ((1,), [1]), (None, 1)]:
        with pytest.raises(tree.TreeStructureError):
            tree.map_structure(lambda *x: x, a, b)


_NO_JAX = textwrap.dedent(
    """
    import sys, dataclasses, json
    sys.modules["jax"] = None  # jax cannot be imported: Grain's fallback rules
    import numpy as np
    import grain_core as grain
    from grain_core import tree

    @dataclasses.dataclass
    class P:
        x: object
    out = {"mode": tree.mode()}
    b = list(grain.MapDataset.source([P(1), P(2)]).batch(2))[0]
    out["dataclass"] = [type(b).__name__, str(b.dtype)]
    d = list(grain.MapDataset.source([{"b": i, "a": i, "n": None} for i in range(2)]).batch(2))[0]
    out["keys"] = list(d)
    out["none"] = [str(d["n"].dtype), d["n"].tolist()]
    try:
        list(grain.MapDataset.source([{"a": 1}, {"b": 2}]).batch(2))
    except KeyError as e:
        out["keys_error"] = [isinstance(e, ValueError), "same structure" in str(e)]
    print(json.dumps(out))
    """
)


def test_without_jax_trees_follow_grains_fallback():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run(
        [sys.executable, "-c", _NO_JAX], capture_output=True, text=True, timeout=120, env=env
    )
    assert res.returncode == 0, res.stderr
    import json

    out = json.loads(res.stdout.strip().splitlines()[-1])
    # Recorded from grain 0.2.18 without jax: a dataclass is a leaf (object array), None is a leaf,
    # dict keys keep insertion order, different keys raise KeyError.
    assert out == {
        "mode": "fallback",
        "dataclass": ["ndarray", "object"],
        "keys": ["b", "a", "n"],
        "none": ["object", [None, None]],
        "keys_error": [True, True],
    }


def test_flax_struct_dataclasses_batch_into_one_dataclass_of_stacked_arrays():
    """The issue's case: flax.struct.dataclass elements (a registered pytree with a static field)
    batch leaf by leaf, as Grain does through jax.tree_util; the static field is kept."""
    from flax import struct

    @struct.dataclass
    class Example:
        x: np.ndarray
        y: int
        name: str = struct.field(pytree_node=False, default="ex")

    for kind in ("map", "iter"):
        out = _batch([Example(np.arange(2) + i, i) for i in range(3)], kind)
        assert type(out) is Example and out.name == "ex"
        np.testing.assert_array_equal(out.x, [[0, 1], [1, 2], [2, 3]])
        np.testing.assert_array_equal(out.y, [0, 1, 2])
