"""``grain_core.seeds.shuffle_tables`` computes, for many seeds at once, exactly the permutations
``IndexShuffle`` gives one seed at a time (Grain's ``index_shuffle``), on both of its paths."""

from __future__ import annotations

import numpy as np
import pytest

from grain_core import seeds


@pytest.mark.parametrize("max_index", [0, 1, 7, 254, 255, 299, 999, 4095, 16383, 16384, 70000])
def test_rows_equal_index_shuffle(max_index):
    rng = np.random.default_rng(max_index)
    chosen = [int(x) for x in rng.integers(0, 2**32, size=5)] + [0, 2**32 - 1]
    tables = seeds.shuffle_tables(max_index, chosen)
    assert tables.shape == (len(chosen), max_index + 1)
    span = np.arange(max_index + 1)
    for row, seed in zip(tables, chosen):
        np.testing.assert_array_equal(row, seeds.IndexShuffle(max_index, seed)(span))
        assert sorted(row.tolist()) == span.tolist()


def test_many_seeds_span_several_passes():
    chosen = list(range(40))  # more tables than one vectorised pass holds
    tables = seeds.shuffle_tables(999, chosen)
    span = np.arange(1000)
    for seed in (0, 31, 32, 39):
        np.testing.assert_array_equal(tables[seed], seeds.IndexShuffle(999, seed)(span))


def test_bad_input():
    with pytest.raises(ValueError):
        seeds.shuffle_tables(10, [-1])
    assert seeds.shuffle_tables(10, []).shape == (0, 11)
