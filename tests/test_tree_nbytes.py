"""``grain_core.tree.nbytes``: the one estimate of an element's bytes (chunk sizes, the
``mp_prefetch`` byte allowance, autotune, the CLI's ``bytes``), per its contract."""

from __future__ import annotations

import dataclasses
import sys
from typing import NamedTuple

import numpy as np

from grain_core.tree import nbytes


class Pair(NamedTuple):
    a: np.ndarray
    b: int


@dataclasses.dataclass
class Record:
    image: np.ndarray
    label: int


def test_arrays_count_their_data():
    assert nbytes(np.zeros((8, 4), np.float32)) == 128
    assert nbytes(np.float64(1.0)) == 8  # a numpy scalar has nbytes too


def test_jax_arrays_count_their_data():
    import jax.numpy as jnp

    assert nbytes(jnp.zeros((10,), jnp.float32)) == 40


def test_python_objects_count_their_own_size():
    for x in (3, 2.5, True, None, "abc", b"x" * 1024, bytearray(10), object()):
        assert nbytes(x) == sys.getsizeof(x)


def test_containers_count_themselves_and_their_items():
    a = np.zeros(16, np.int64)
    d = {"a": a, "b": [1, "xy"]}
    assert nbytes(d) == sys.getsizeof(d) + 128 + sys.getsizeof(d["b"]) + sys.getsizeof(1) + (
        sys.getsizeof("xy")
    )
    p = Pair(a, 7)
    assert nbytes(p) == sys.getsizeof(p) + 128 + sys.getsizeof(7)
    r = Record(a, 3)
    assert nbytes(r) == sys.getsizeof(r) + 128 + sys.getsizeof(3)


def test_deep_and_self_referencing_structures_terminate():
    loop: list = [1]
    loop.append(loop)
    assert nbytes(loop) > 0
    deep: list = []
    for _ in range(100):
        deep = [deep]
    assert nbytes(deep) == 9 * sys.getsizeof([[]])  # 8 levels counted, the 9th by its own size
