"""``grain_core.validation.check_instance``: the one home of "argument of the wrong class" errors.

The kernel's type checks of an argument's class go through it, so every such error reads
"<what> <verb> <expected>, got <type name>." The modules already moved onto it keep no
hand-written ``if not isinstance(...): raise TypeError(...)`` (checked on the source with :mod:`ast`).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

import grain_core as grain
from grain_core.validation import check_instance

PACKAGE = Path(__file__).resolve().parents[1] / "grain_core"

# Modules whose class checks all go through check_instance.
MOVED = [
    "state.py",
    "element_spec.py",
    "samplers.py",
    "dataset/base.py",
    "dataset/iter_ops.py",
    "dataset/filter_ops.py",
    "dataset/batch_ops.py",
    "dataset/stages.py",
    "dataset/prefetch.py",
    "dataset/elastic_iterator.py",
    "dataset/grain_attrs.py",
    "runtime/multiprocess.py",
    "runtime/multithread.py",
    "runtime/thread_prefetch.py",
]


def _hand_written_class_checks(source: str) -> list[int]:
    """Lines of ``if not isinstance(x, C): raise TypeError(...)`` (the shape check_instance
    replaces)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.If) and node.body and isinstance(node.body[0], ast.Raise)):
            continue
        exc = node.body[0].exc
        raises_type_error = (
            isinstance(exc, ast.Call)
            and isinstance(exc.func, ast.Name)
            and exc.func.id == "TypeError"
        )
        # the test is ``not isinstance(...)`` or ``... and not isinstance(...)`` (an int check such
        # as ``isinstance(x, bool) or not isinstance(x, int)`` is another shape, left alone here)
        parts = (
            node.test.values
            if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And)
            else [node.test]
        )
        negated_isinstance = any(
            isinstance(sub, ast.UnaryOp)
            and isinstance(sub.op, ast.Not)
            and isinstance(sub.operand, ast.Call)
            and getattr(sub.operand.func, "id", None) == "isinstance"
            for sub in parts
        )
        if raises_type_error and negated_isinstance:
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("module", MOVED)
def test_moved_modules_keep_no_hand_written_class_check(module):
    path = PACKAGE / module
    assert _hand_written_class_checks(path.read_text()) == [], (
        f"{module}: use grain_core.validation.check_instance for class checks"
    )


def test_the_checker_finds_a_hand_written_check():
    src = (
        "def f(x):\n"
        "    if not isinstance(x, int):\n"
        "        raise TypeError(f'x must be an int, got {type(x).__name__}.')\n"
        "    if x is not None and not isinstance(x, str):\n"
        "        raise TypeError('no')\n"
        "    if isinstance(x, bool):\n"
        "        raise ValueError('a bool')\n"
        "    if isinstance(x, bool) or not isinstance(x, int):\n"
        "        raise TypeError('an int check')\n"
    )
    assert _hand_written_class_checks(src) == [2, 4]


class _Options:
    pass


def test_returns_the_value_of_the_right_class():
    o = _Options()
    assert check_instance(o, _Options, "options") is o
    assert check_instance(None, (_Options, type(None)), "options") is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "options must be a _Options, got list."),
        ({"verb": "expects"}, "options expects a _Options, got list."),
        (
            {"verb": "needs", "expected": "an options parent", "hint": " Wrap it first."},
            "options needs an options parent, got list. Wrap it first.",
        ),
    ],
)
def test_message(kwargs, message):
    with pytest.raises(TypeError) as info:
        check_instance([], _Options, "options", **kwargs)
    assert str(info.value) == message


def test_article_and_alternatives():
    with pytest.raises(TypeError, match=r"^x must be an IterDataset or a Mapping, got int\.$"):
        check_instance(3, (grain.IterDataset, Mapping), "x")


class _Stage(grain.MapDataset):
    def __len__(self):
        return 0

    def __getitem__(self, index):
        return index


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: _Stage([3]), "_Stage parents must be MapDataset or IterDataset, got int."),
        (
            lambda: grain.MapDataset.range(3).to_iter_dataset(read_options={}),
            "read_options must be a ReadOptions, got dict.",
        ),
        (
            lambda: grain.experimental.multithread_prefetch([1], num_threads=1, buffer_size=1),
            "multithread_prefetch expects an IterDataset, got list.",
        ),
        (
            lambda: grain.experimental.get_element_spec([1]),
            "get_element_spec expects a MapDataset or IterDataset, got list.",
        ),
        (
            lambda: grain.MapDataset.range(3).to_iter_dataset().mp_prefetch(options=3),
            "multiprocessing_options must be a MultiprocessingOptions, got int.",
        ),
        (
            lambda: iter(grain.MapDataset.range(3).to_iter_dataset()).set_state([1]),
            "set_state expects the dict returned by get_state(), got list.",
        ),
    ],
)
def test_kernel_messages_read_as_before(call, message):
    with pytest.raises(TypeError) as info:
        call()
    assert str(info.value) == message
