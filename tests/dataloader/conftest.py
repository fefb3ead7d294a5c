"""Shared helpers for the DataLoader tests: in-memory sources and picklable transforms."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import grain_core as grain


class CountingSource:
    """An in-memory source that counts how often it is entered and exited."""

    def __init__(self, n: int):
        self._data = list(range(n))
        self.entered = 0
        self.exited = 0

    def __len__(self):
        return len(self._data)

    def __getitem__(self, i):
        if self.entered <= self.exited:
            raise RuntimeError("read from a closed source")
        return self._data[i]

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        self.exited += 1

    def __repr__(self):
        return f"CountingSource({len(self._data)})"


@dataclasses.dataclass
class PlusOne(grain.transforms.Map):
    def map(self, x):
        return x + 1


@dataclasses.dataclass
class Square(grain.transforms.Map):
    def map(self, x):
        return x * x


@dataclasses.dataclass
class AddNoise(grain.transforms.RandomMap):
    def random_map(self, x, rng):
        return (int(x), int(rng.integers(0, 1_000_000)))


@dataclasses.dataclass
class Tag(grain.transforms.MapWithIndex):
    def map_with_index(self, index, x):
        return (index, x)


@dataclasses.dataclass
class Even(grain.transforms.Filter):
    def filter(self, x):
        return x % 2 == 0


@dataclasses.dataclass
class Twice(grain.transforms.FlatMap):
    max_fan_out: int = 2

    def flat_map(self, x):
        return [x, x]


def as_list(batch):
    return np.asarray(batch).tolist()


@pytest.fixture(scope="session")
def has_runtime():
    """The worker runtime is part of the kernel: a failed import fails the tests that need it
    (never a skip that would hide it)."""
    import grain_core.runtime.multiprocess  # noqa: F401
