"""The sampler's per-record generator is Grain's ``Generator(Philox(key=seed + index))``, built
without drawing OS entropy (``samplers._PhiloxKey``), and still a new, independent generator."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import grain_core as grain
from grain_core.samplers import _PhiloxKey

KEYS = [0, 1, 7, 2**31, 2**32 - 1, 2**32 + 5, 2**63 - 1, 2**63, 2**64 - 1, 2**64 + 3, 2**64 + 2**32]


def grains(key: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=key))


@pytest.mark.parametrize("key", KEYS)
def test_state_and_draws_are_grains(key):
    ours = np.random.Generator(np.random.Philox(_PhiloxKey(key)))
    theirs = grains(key)
    assert str(ours.bit_generator.state) == str(theirs.bit_generator.state)
    assert ours.integers(0, 2**62, 8).tolist() == theirs.integers(0, 2**62, 8).tolist()
    np.testing.assert_array_equal(ours.normal(size=5), theirs.normal(size=5))
    np.testing.assert_array_equal(ours.random(7), theirs.random(7))


@pytest.mark.parametrize("seed", [0, 3, 2**32 - 1])
def test_sampler_rng_equals_grains_for_each_position(seed):
    s = grain.IndexSampler(50, shuffle=True, seed=seed, num_epochs=3)
    for i in (0, 1, 49, 50, 149):
        assert s.rng(i).random(3).tolist() == grains(seed + i).random(3).tolist()
        assert s[i].rng.integers(0, 1000, 4).tolist() == grains(seed + i).integers(0, 1000, 4).tolist()


def test_each_call_a_new_generator():
    s = grain.IndexSampler(10, seed=1, num_epochs=1)
    a, b = s.rng(4), s.rng(4)
    assert a is not b and a.bit_generator is not b.bit_generator
    first = a.random()
    assert b.random() == first  # drawing from one does not advance the other


def test_pickle_copy_and_spawn_work():
    g = grain.IndexSampler(10, seed=1, num_epochs=1).rng(2)
    g.random()
    after = g.bit_generator.state
    for clone in (pickle.loads(pickle.dumps(g)), copy.deepcopy(g)):
        assert str(clone.bit_generator.state) == str(after)
        assert clone.random() == copy.deepcopy(g).random()
    children = g.spawn(3)  # children of fresh entropy, as Philox(key=...)'s unused seed sequence
    draws = [c.random() for c in children]
    assert len(set(draws)) == 3
    assert all(isinstance(c.bit_generator, np.random.Philox) for c in children)


def test_key_seed_refuses_other_requests():
    with pytest.raises(ValueError, match="Philox's key"):
        _PhiloxKey(3).generate_state(4, np.uint32)
