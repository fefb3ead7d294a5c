"""Plugins use only the kernel's public API (issue 13): no name starting with ``_`` from grain_core.

Scans the source of every built-in plugin (``plugins/grain-plugin-*/``, package and tests) and of
``examples/grain-plugin-example/`` with ``ast`` and fails on

* an import of a private grain_core name or module (``from grain_core.x import _y``,
  ``import grain_core._x``);
* an attribute ``m._y`` of a grain_core module (however it was imported or aliased);
* any use (read, write, call) or definition (an override) of a private name that the kernel's
  public base classes define: ``self._parents``, ``it._options``, ``self._lineage``,
  ``def _default_seed(self)``, ...
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import grain_core as grain

# The module (grain_core.dataset's attribute of that name is the stage table of base.py).
stages = importlib.import_module("grain_core.dataset.stages")

ROOT = Path(__file__).resolve().parent.parent
SCANNED = sorted(ROOT.glob("plugins/grain-plugin-*")) + [ROOT / "examples" / "grain-plugin-example"]


GRAIN_ATTRS = "grain_core.dataset.grain_attrs"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def kernel_private_names() -> frozenset[str]:
    """Private attributes of the classes a stage author subclasses: defined on the classes (methods)
    or set on their instances by the kernel (``_parents``, ``_options``, ...)."""
    bases = [grain.MapDataset, grain.IterDataset, grain.DatasetIterator]
    bases += [getattr(stages, n) for n in stages.__all__ if isinstance(getattr(stages, n), type)]
    names: set[str] = set()
    for base in bases:
        for klass in base.__mro__:
            # Grain's private attributes (grain_attrs) serve code written for Grain, not the
            # stage-author API, and a stage may shadow them with its own (``self._parent``).
            if klass.__module__.startswith("grain_core") and klass.__module__ != GRAIN_ATTRS:
                names |= {n for n in vars(klass) if _private(n)}
                names |= {n for n in getattr(klass, "__annotations__", {}) if _private(n)}

    class M(grain.MapDataset):
        def __len__(self):
            return 0

    class It0(grain.IterDataset):
        def __iter__(self):
            raise NotImplementedError

    class It(grain.DatasetIterator):
        def __next__(self):
            raise StopIteration

        def get_state(self):
            return {}

    for obj in (M(), It0(), It()):
        names |= {n for n in vars(obj) if _private(n)}
    # Grain's element-spec hook keeps Grain's name: stages written for Grain override it, and the
    # writing-plugins guide documents it as part of the stage-author API.
    return frozenset(names - GRAIN_HOOKS)


#: Underscore names that are documented hooks of the stage-author API (Grain's names).
GRAIN_HOOKS = frozenset({"_element_spec"})


def _sources() -> list[Path]:
    files = []
    for root in SCANNED:
        files += [
            p
            for p in root.rglob("*.py")
            if ".egg-info" not in str(p) and "build" not in p.relative_to(root).parts
        ]
    return sorted(files)


def violations(source: str, private: frozenset[str]) -> Iterator[str]:
    """Each use of a private grain_core name in ``source``, as ``line: what``."""
    tree = ast.parse(source)
    modules: set[str] = set()  # local names bound to grain_core modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "grain_core" or a.name.startswith("grain_core."):
                    if any(_private(part) for part in a.name.split(".")):
                        yield f"{node.lineno}: import {a.name}"
                    modules.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and (
            node.module == "grain_core" or node.module.startswith("grain_core.")
        ):
            if any(_private(part) for part in node.module.split(".")):
                yield f"{node.lineno}: from {node.module} import ..."
            for a in node.names:
                if _private(a.name):
                    yield f"{node.lineno}: from {node.module} import {a.name}"
                modules.add(a.asname or a.name)  # a module or a class: both count
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if node.attr in private:
                yield f"{node.lineno}: .{node.attr} (a private name of the kernel's base classes)"
            elif isinstance(node.value, ast.Name) and node.value.id in modules:
                yield f"{node.lineno}: {node.value.id}.{node.attr}"
            elif isinstance(node.value, ast.Attribute):
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in modules:
                    yield f"{node.lineno}: {ast.unparse(node)}"
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in private:
                    yield f"{item.lineno}: def {item.name} overrides a private kernel method"
                if isinstance(item, (ast.Assign, ast.AnnAssign)):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    for t in targets:
                        if isinstance(t, ast.Name) and t.id in private:
                            yield f"{item.lineno}: {t.id} = ... overrides a private kernel name"


def test_kernel_private_names_are_found():
    private = kernel_private_names()
    assert {"_parents", "_options", "_lineage", "_default_seed"} <= private
    # The kernel keeps no private twin of the stage protocol (issue 29): nothing to find.
    assert not {"_getitem", "_fingerprint_fields", "_apply_options", "_resolve_seed"} & private


def test_the_scan_catches_each_kind_of_private_use():
    private = kernel_private_names()
    bad = '''
import grain_core as grain
import grain_core.dataset.base as base
from grain_core import seeds as _seeds
from grain_core.dataset.base import _as_parents

class S(grain.MapDataset):
    def _default_seed(self):
        return self._parents[0]._lineage

    def fingerprint_fields(self):
        return (self._options, _seeds._splitmix64(1), base._plugin_factory)
'''
    found = list(violations(bad, private))
    text = "\n".join(found)
    for what in ("_as_parents", "def _default_seed", "._parents", "._lineage",
                 "._options", "_seeds._splitmix64", "base._plugin_factory"):
        assert what in text, (what, found)
    good = '''
import grain_core as grain
from grain_core.dataset.stages import OneParentMapDataset

class S(OneParentMapDataset):
    def __init__(self, parent):
        super().__init__(parent)
        self._mine = self.resolve_seed(None)

    def element_at(self, i):
        return self.parent.element_at(i)
'''
    assert list(violations(good, private)) == []


def test_scanned_trees_exist():
    assert len(SCANNED) >= 8 and all(p.is_dir() for p in SCANNED)
    assert len(_sources()) > 20


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_plugin_uses_only_public_kernel_names(path):
    found = list(violations(path.read_text(), kernel_private_names()))
    assert not found, (
        f"{path.relative_to(ROOT)} uses private grain_core names (use the stage-author API in "
        "docs/writing-plugins.md):\n  " + "\n  ".join(found)
    )
