"""The transform-kind table in ``grain_core/transforms.py`` is the one home of transform-kind dispatch.

Which of ``Map`` / ``RandomMap`` / ``MapWithIndex`` / ``Filter`` / ``FlatMap`` / ``Batch`` an object
is, and which method to call on it, is answered by ``TRANSFORM_KINDS`` and its helpers
(``kind_of``, ``is_transform``, ``is_kind``, ``method_name``). Every other kernel module asks them:
no ``isinstance`` / ``issubclass`` against a transform class and no tuple, list, set or dict of
transform classes anywhere else in ``grain_core/`` (checked on the source with :mod:`ast`).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import grain_core as grain
from grain_core import transforms as tr

PACKAGE = Path(__file__).resolve().parents[1] / "grain_core"
TABLE_MODULE = PACKAGE / "transforms.py"

# Every name a transform class is reachable under (Grain's long aliases too).
KIND_NAMES = {
    "Map",
    "RandomMap",
    "MapWithIndex",
    "Filter",
    "FlatMap",
    "Batch",
    "MapTransform",
    "RandomMapTransform",
    "MapWithIndexTransform",
    "FilterTransform",
    "FlatMapTransform",
}


def _names_in(node: ast.AST) -> set[str]:
    """The transform-class names an expression mentions (``tr.Map``, ``Map``, ``transforms.Map``)."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in KIND_NAMES:
            if isinstance(sub.value, ast.Name) and sub.value.id in {"tr", "transforms", "grain"}:
                found.add(sub.attr)
        elif isinstance(sub, ast.Name) and sub.id in KIND_NAMES:
            found.add(sub.id)
    return found


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE.parent) else path.name
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"isinstance", "issubclass"}
            and len(node.args) == 2
            and _names_in(node.args[1])
        ):
            out.append(f"{where}:{node.lineno}: {node.func.id}")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            parts = node.keys if isinstance(node, ast.Dict) else node.elts
            if len(set().union(*(_names_in(e) for e in parts if e is not None))) >= 2:
                out.append(f"{where}:{node.lineno}: a table of transform kinds")
    return out


def test_no_kernel_module_tests_transform_kinds_outside_the_table():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != TABLE_MODULE:
            found.extend(_violations(path))
    assert not found, (
        "transform-kind dispatch outside grain_core/transforms.py's table; use tr.kind_of / "
        "tr.is_transform / tr.is_kind / tr.method_name instead:\n" + "\n".join(found)
    )


def test_the_checker_finds_a_hand_written_dispatch(tmp_path):
    # The check above must fail when someone writes the old dispatch again.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from grain_core import transforms as tr\n"
        "from grain_core.transforms import FilterTransform\n"
        "KINDS = (tr.Map, FilterTransform)\n"
        "METHODS = {tr.Map: 'map', tr.Filter: 'filter'}\n"
        "def f(op, cls):\n"
        "    return isinstance(op, tr.FlatMap) or issubclass(cls, (tr.Batch,))\n"
        "def ok(op):\n"
        "    return tr.is_kind(op, tr.FlatMap) and isinstance(op, tuple)\n"
    )
    assert _violations(probe) == [
        "probe.py:3: a table of transform kinds",
        "probe.py:4: a table of transform kinds",
        "probe.py:6: isinstance",
        "probe.py:6: issubclass",
    ]


class _M(tr.Map):
    def map(self, x):
        return x


class _R(tr.RandomMap):
    def random_map(self, x, rng):
        return x


class _I(tr.MapWithIndex):
    def map_with_index(self, i, x):
        return x


class _F(tr.Filter):
    def filter(self, x):
        return True


class _FM(tr.FlatMap):
    def flat_map(self, x):
        return [x]


class _MapAndFilter(tr.Map, tr.Filter):
    def map(self, x):
        return x

    def filter(self, x):
        return True


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        (_M(), tr.Map),
        (_R(), tr.RandomMap),
        (_I(), tr.MapWithIndex),
        (_F(), tr.Filter),
        (_FM(), tr.FlatMap),
        (tr.Batch(2), tr.Batch),
        (_MapAndFilter(), tr.Map),  # the first kind in table order
        (lambda x: x, None),
        (3, None),
    ],
)
def test_kind_of(obj, kind):
    assert tr.kind_of(obj) is kind
    assert tr.is_transform(obj) == (kind is not None)


def test_table_covers_every_kind_and_names_its_abstract_method():
    assert tr.TRANSFORM_CLASSES == (
        tr.Batch,
        tr.Map,
        tr.RandomMap,
        tr.MapWithIndex,
        tr.Filter,
        tr.FlatMap,
    )
    for kind in tr.TRANSFORM_KINDS:
        if kind.cls is tr.Batch:
            assert kind.method is None
            with pytest.raises(KeyError):
                tr.method_name(tr.Batch)
        else:
            assert kind.cls.__abstractmethods__ == frozenset({kind.method})
            assert tr.method_name(kind.cls) == kind.method
            assert inspect.isfunction(getattr(kind.cls, kind.method))


def test_is_kind_takes_only_kinds_of_the_table():
    assert tr.is_kind(_FM(), tr.FlatMap, tr.Batch)
    assert tr.is_kind(tr.Batch(1), tr.FlatMap, tr.Batch)
    assert not tr.is_kind(_M(), tr.FlatMap, tr.Batch)
    with pytest.raises(ValueError, match="is not a transform kind"):
        tr.is_kind(_M(), int)


def test_the_table_names_are_kernel_helpers_not_grain_surface():
    # grain.transforms keeps Grain's public names; the table is for kernel modules.
    for name in ("TRANSFORM_KINDS", "kind_of", "is_transform", "is_kind", "method_name"):
        assert name not in tr.__all__
    assert grain.transforms.kind_of is tr.kind_of


def test_every_dispatcher_uses_the_table():
    # apply(), the dataset methods, the DataLoader (plain and over records) all still dispatch.
    ds = grain.MapDataset.range(6)
    out = list(ds.apply([_M(), _I(), _F(), _FM(), tr.Batch(3)]))
    assert [list(b) for b in out] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TypeError, match=r"map\(\) expects a Map transform or a callable, got a _F"):
        ds.map(_F())
    loader = grain.DataLoader(
        data_source=list(range(4)),
        sampler=grain.samplers.IndexSampler(4, shuffle=False, num_epochs=1, seed=0),
        operations=[_M(), _R(), _I(), _F(), tr.Batch(2)],
    )
    assert [list(b) for b in loader] == [[0, 1], [2, 3]]
