"""``RngPool`` (Grain's ``grain.experimental.RngPool``): reusable per-element random generators.

``pool.acquire_rng(index, op_seed=0)`` returns a ``np.random.Generator`` over a Philox bit generator
seeded with the pool's ``seed`` (through numpy's ``SeedSequence``, as ``np.random.Philox(seed)``),
with its counter set to ``[0, 0, op_seed, index]`` and its buffer emptied: the numbers it produces
are a pure function of ``(seed, op_seed, index)`` -- the same as Grain's ``RngPool`` for the same
arguments. ``release_rng(rng)`` hands the generator back for reuse, which saves constructing one per
element. Thread-safe; pickles as its seed.
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["RngPool"]


def _position(rng: np.random.Generator, op_seed: int, index: int) -> None:
    state: dict = dict(rng.bit_generator.state)
    state["state"] = dict(state["state"])
    state["state"]["counter"] = np.array([0, 0, op_seed, index], dtype=np.uint64)
    state["buffer"] = np.zeros(4, dtype=np.uint64)
    state["buffer_pos"] = 4
    state["has_uint32"] = 0
    state["uinteger"] = 0
    rng.bit_generator.state = state


class RngPool:
    """A pool of ``np.random.Generator`` objects positioned per ``(op_seed, index)``."""

    def __init__(self, seed: int):
        self._seed = seed
        self._free: list[np.random.Generator] = []
        self._lock = threading.Lock()

    def __reduce__(self):
        return (RngPool, (self._seed,))

    def acquire_rng(self, index: int, *, op_seed: int = 0) -> np.random.Generator:
        """A generator whose stream is a pure function of ``(seed, op_seed, index)``."""
        with self._lock:
            rng = self._free.pop() if self._free else None
        if rng is None:
            rng = np.random.Generator(np.random.Philox(self._seed))
        _position(rng, op_seed, index)
        return rng

    def release_rng(self, rng: np.random.Generator) -> None:
        """Returns ``rng`` to the pool (do not use it afterwards)."""
        with self._lock:
            self._free.append(rng)

    def __repr__(self) -> str:
        return f"RngPool(seed={self._seed})"
