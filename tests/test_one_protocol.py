"""One stage protocol (issue 29): the kernel's stages implement the public stage API only.

* No module of ``grain_core/`` or ``plugins/`` defines a private twin of a public stage method
  (``_getitem`` beside ``element_at``, ``_fingerprint_fields``, ``_resolve_seed``,
  ``_apply_options``, ``_extra_state`` ...).
* ``OneParentIterator``'s ready state (``position_fields`` / ``position_state`` /
  ``restore_position``) works for a stage that writes only those, as the kernel's ``map``,
  ``batch`` and ``repeat`` iterators do.
* A Grain-style ``MapDataset`` subclass that implements ``__getitem__`` is read by the stages
  above it through ``element_at``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import grain_core as grain
from grain_core.author import OneParentIterator, StateField, StateMismatchError
from grain_core.dataset.stages import OneParentIterDataset

ROOT = Path(__file__).resolve().parent.parent
TWINS = {
    "_getitem": "element_at",
    "_fingerprint_fields": "fingerprint_fields",
    "_resolve_seed": "resolve_seed",
    "_apply_options": "apply_options",
    "_extra_state": "state_fields / position_state",
    "_check_extra_state": "check_state",
    "_set_extra_state": "restore_state / restore_position",
}


def _sources() -> list[Path]:
    files = sorted((ROOT / "grain_core").rglob("*.py"))
    files += [p for p in sorted((ROOT / "plugins").rglob("*.py")) if "build" not in p.parts]
    return files


def test_no_private_twin_of_the_stage_protocol():
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in TWINS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} def {node.name} "
                             f"(the public name is {TWINS[node.name]})")
            elif isinstance(node, ast.Attribute) and node.attr in TWINS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert found == []


class _Skip(OneParentIterDataset):
    """Drops every second element; its iterator writes only the three position hooks."""

    def __iter__(self):
        return _SkipIterator(self.parent.__iter__())


class _SkipIterator(OneParentIterator):
    kind = "Skip"

    def __init__(self, parent):
        super().__init__(parent)
        self.count = 0

    def __next__(self):
        next(self.parent)
        x = next(self.parent)
        self.count += 1
        return x

    def position_fields(self):
        return {"count": StateField.position()}

    def position_state(self):
        return {"count": self.count}

    def restore_position(self, state):
        self.count = state["count"]


def test_one_parent_iterator_ready_state():
    ds = _Skip(grain.MapDataset.source(list(range(20))).to_iter_dataset())
    it = iter(ds)
    assert [next(it), next(it)] == [1, 3]
    state = it.get_state()
    assert state["kind"] == "Skip" and state["count"] == 2 and isinstance(state["parent"], dict)
    rest = list(it)
    it2 = iter(ds)
    it2.set_state(state)
    assert list(it2) == rest == [5, 7, 9, 11, 13, 15, 17, 19]
    it3 = iter(ds)
    with pytest.raises(StateMismatchError, match="count"):
        it3.set_state({k: v for k, v in state.items() if k != "count"})
    assert next(it3) == 1  # refused: nothing moved


def test_kernel_stage_state_fields_are_declared():
    ds = grain.MapDataset.source(list(range(10))).to_iter_dataset().random_map(
        lambda x, rng: x, seed=3
    )
    it = iter(ds)
    next(it)
    fields = it.state_fields()
    assert set(fields) == {"parent", "count", "seed"}
    other = iter(grain.MapDataset.source(list(range(10))).to_iter_dataset().random_map(
        lambda x, rng: x, seed=4
    ))
    with pytest.raises(StateMismatchError, match="seed 3 vs 4"):
        other.set_state(it.get_state())


class _GrainStyle(grain.MapDataset):
    def __init__(self):
        super().__init__()

    def __len__(self):
        return 5

    def __getitem__(self, index):
        return index * 10


def test_grain_style_getitem_is_the_element_hook():
    ds = _GrainStyle()
    assert _GrainStyle.element_at is _GrainStyle.__dict__["__getitem__"]
    assert ds.map(lambda x: x + 1)[3] == 31
    assert list(ds.to_iter_dataset()) == [0, 10, 20, 30, 40]
