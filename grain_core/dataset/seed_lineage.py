"""Seed lineage: where a dataset sits below ``seed()`` calls (the seeds it sees and its depth).

Every dataset records the lineage below its parents when it is built; a ``seed()`` stage starts a
new one. A random stage with no explicit seed and no ``seed()`` upstream takes
:func:`fallback_seed` of its lineage: Grain's derivation from a fixed base seed and the depth
(the seed contract, ``docs/contracts.md``; derivations in :mod:`grain_core.seeds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grain_core import seeds as _seeds

__all__ = ["DEFAULT_BASE_SEED", "SeedLineage", "fallback_seed"]

#: The pipeline seed of a random stage with neither ``seed=`` nor ``seed()`` upstream.
DEFAULT_BASE_SEED = 0


class SeedLineage:
    """Where a dataset sits below ``seed()`` calls: the pipeline seeds it sees and its depth."""

    __slots__ = ("seeds", "depth")

    def __init__(self, seeds: tuple[int, ...], depth: int):
        self.seeds = seeds
        self.depth = depth

    @classmethod
    def below(cls, parents: Sequence[Any]) -> SeedLineage:
        seeds: list[int] = []
        depth = 0
        for p in parents:
            lin = getattr(p, "_lineage", None)
            if lin is None:
                continue
            for s in lin.seeds:
                if s not in seeds:
                    seeds.append(s)
            depth = max(depth, lin.depth + 1)
        return cls(tuple(seeds), depth)


def fallback_seed(lineage: SeedLineage) -> int:
    """The seed of a random stage with no explicit seed and none derived from ``seed()`` upstream."""
    return _seeds.derive_seed((DEFAULT_BASE_SEED,), lineage.depth)
