"""The seed contract: how pipeline seeds become per-stage and per-element randomness, as in Grain.

Every rule here reproduces google grain 0.2.18 exactly, so the same seed gives the same data in
both (recorded outputs: ``tests/compat_semantics/data/``; rules: ``docs/differences.md``):

* ``ds.seed(s)`` sets the pipeline seed for everything downstream. A random stage with no explicit
  ``seed=`` takes :func:`default_seed` of itself: a breadth-first walk up its parents collects
  ``(seed, depth)`` of the nearest ``seed()`` call on every path, and
  ``np.random.SeedSequence(collected).generate_state(1, uint32)[0]`` is the stage's seed. An
  explicit ``seed=`` always wins.
* Per-element randomness of a ``MapDataset`` stage is :func:`element_rng`: NumPy's
  ``Philox(seed)`` with the counter set to ``[0, 0, 0, index]`` — a pure function of
  ``(stage seed, element index)``. Python's ``hash()`` is never used.
* Global and window shuffles use Grain's index shuffle, a keyed bijection of the indices
  (:mod:`grain_core.shuffle_cipher`), seeded by the stage seed these rules give.

Plugins must use these functions so that their randomness obeys the same rules as the kernel's.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "MAX_SEED",
    "ElementRngs",
    "default_seed",
    "derive_seed",
    "element_rng",
    "validate_seed",
]

MAX_SEED = 2**32 - 1
_M64 = 0xFFFF_FFFF_FFFF_FFFF
_GOLDEN = 0x9E37_79B9_7F4A_7C15
_MIX1 = 0xBF58_476D_1CE4_E5B9
_MIX2 = 0x94D0_49BB_1331_11EB


def validate_seed(seed: object, what: str = "seed", *, bounded: bool = True) -> int:
    """Returns ``seed`` as an int if Grain accepts it, else raises.

    ``bounded`` seeds (``shuffle``, samplers) must lie in ``[0, 2**32)``; unbounded ones
    (``ds.seed``, ``random_map``) only need to be non-negative, as NumPy's ``SeedSequence`` takes
    any non-negative integer.

    Raises:
      TypeError: ``seed`` is not an integer (bools are refused too).
      ValueError: ``seed`` is negative, or at least ``2**32`` where ``bounded``.
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{what} must be an integer in [0, 2**32), got {type(seed).__name__} {seed!r}.")
    value = int(seed)
    if value < 0 or (bounded and value > MAX_SEED):
        raise ValueError(
            f"{what[:1].upper()}{what[1:]} must be an integer between 0 and 2**32-1 (got seed={value})."
        )
    return value


def _splitmix64(x: int) -> int:
    x = (x + _GOLDEN) & _M64
    x = ((x ^ (x >> 30)) * _MIX1) & _M64
    x = ((x ^ (x >> 27)) * _MIX2) & _M64
    return x ^ (x >> 31)


def derive_seed(seeds: int | Sequence[int], *salt: int) -> int:
    """Returns a seed in ``[0, 2**32)`` that depends on every value of ``seeds`` and ``salt``.

    A helper for plugins with randomness Grain does not have (Grain-equivalent stages use Grain's
    own derivations). Order matters; the result is stable across processes and platforms.
    """
    values = (seeds,) if isinstance(seeds, (int, np.integer)) else tuple(seeds)
    acc = 0x6772_6169_6E5F_636F  # arbitrary non-zero start
    for v in (*values, len(values), *salt):
        acc = _splitmix64(acc ^ (int(v) & _M64))
    return acc >> 32


def default_seed(node: Any) -> int | None:
    """Grain's default seed of a random stage at ``node``, or None when no ``seed()`` is upstream.

    Walks the dataset graph breadth first from ``node`` (depth 0) through ``node.parents``; a node
    whose ``_seed_rng_seed`` is set contributes ``(its seed, depth)`` and ends that path. The
    collected list seeds ``np.random.SeedSequence``; its first ``uint32`` word is the result.
    """
    collected: list[int] = []
    to_visit: deque[tuple[Any, int]] = deque([(node, 0)])
    while to_visit:
        current, depth = to_visit.popleft()
        own = getattr(current, "_seed_rng_seed", None)
        if own is not None:
            collected.extend((int(own), depth))
        else:
            to_visit.extend((p, depth + 1) for p in getattr(current, "_parents", ()))
    if not collected:
        return None
    return int(np.random.SeedSequence(collected).generate_state(1, dtype=np.uint32)[0])


# --- per-element generators ---------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _philox_key(seed: int) -> tuple[int, int]:
    key = np.random.Philox(seed).state["state"]["key"]
    return int(key[0]), int(key[1])


def _philox_state(seed: int, index: int, op_seed: int = 0) -> dict:
    return {
        "bit_generator": "Philox",
        "state": {
            "counter": np.array([0, 0, op_seed & _M64, index & _M64], dtype=np.uint64),
            "key": np.array(_philox_key(seed), dtype=np.uint64),
        },
        "buffer": np.zeros(4, dtype=np.uint64),
        "buffer_pos": 4,
        "has_uint32": 0,
        "uinteger": 0,
    }


def element_rng(seed: int, index: int, op_seed: int = 0) -> np.random.Generator:
    """Returns Grain's generator for element ``index`` of a stage seeded ``seed``.

    ``np.random.Generator(np.random.Philox(seed))`` with its counter set to
    ``[0, 0, op_seed, index]`` — what Grain's ``random_map`` passes to the transform.
    """
    gen = np.random.Generator(np.random.Philox(int(seed)))
    gen.bit_generator.state = _philox_state(int(seed), int(index), int(op_seed))
    return gen


class ElementRngs:
    """Per-element generators for one stage seeded ``seed``, reusing one generator per thread:
    ``rngs(index)`` equals ``element_rng(seed, index)`` in every draw but costs a state reset
    instead of a construction. The returned generator is only valid until the next call from the
    same thread.
    """

    def __init__(self, seed: int):
        self._setup(seed)

    def _setup(self, seed: int) -> None:
        self._seed = int(seed)
        self._key = np.array(_philox_key(self._seed), dtype=np.uint64)
        self._local = threading.local()

    def __getstate__(self) -> dict:
        return {"seed": self._seed}

    def __setstate__(self, state: dict) -> None:
        self._setup(state["seed"])

    def __call__(self, index: int, op_seed: int = 0) -> np.random.Generator:
        local = self._local
        gen = getattr(local, "gen", None)
        if gen is None:
            gen = local.gen = np.random.Generator(np.random.Philox(self._seed))
        gen.bit_generator.state = {
            "bit_generator": "Philox",
            "state": {
                "counter": np.array([0, 0, int(op_seed) & _M64, int(index) & _M64], dtype=np.uint64),
                "key": self._key,
            },
            "buffer": np.zeros(4, dtype=np.uint64),
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }
        return gen

