"""Smaller Grain names: RepeatIterDataset, batch_and_pad, index_shuffle, get/set_next_index,
apply_transformations and the transform aliases."""

import functools

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing


def test_repeat_iter_dataset():
    base = grain.MapDataset.range(3).to_iter_dataset()
    assert list(grain.experimental.RepeatIterDataset(base, num_epochs=3)) == [0, 1, 2] * 3
    forever = iter(grain.experimental.RepeatIterDataset(base))
    assert [next(forever) for _ in range(8)] == [0, 1, 2, 0, 1, 2, 0, 1]
    empty = grain.MapDataset.range(0).to_iter_dataset()
    assert list(grain.experimental.RepeatIterDataset(empty)) == []
    testing.assert_equal_output_after_checkpoint(
        grain.experimental.RepeatIterDataset(base.map(lambda x: x * 10), num_epochs=4)
    )
    with pytest.raises(ValueError, match="num_epochs"):
        grain.experimental.RepeatIterDataset(base, num_epochs=0)


def test_batch_and_pad():
    fn = functools.partial(grain.experimental.batch_and_pad, batch_size=4, pad_value=-1)
    out = list(grain.MapDataset.range(6).batch(4, batch_fn=fn))
    assert [b.tolist() for b in out] == [[0, 1, 2, 3], [4, 5, -1, -1]]
    tree = grain.experimental.batch_and_pad([{"x": np.ones(2)}], batch_size=2)
    assert tree["x"].tolist() == [[1.0, 1.0], [0.0, 0.0]]
    with pytest.raises(ValueError, match="3 values for batch_size=2"):
        grain.experimental.batch_and_pad([1, 2, 3], batch_size=2)


def test_index_shuffle_is_a_permutation_of_closed_range():
    out = [grain.experimental.index_shuffle(i, max_index=9, seed=3, rounds=4) for i in range(10)]
    assert sorted(out) == list(range(10))
    assert out != list(range(10))


@pytest.mark.parametrize("max_index", [70_000, 2**20 + 5, 2**33])
@pytest.mark.parametrize("size", [1, 23, 24, 25, 300, 5000])
def test_index_shuffle_arrays_equal_one_index_at_a_time(max_index, size):
    # Arrays walk as arrays, then their last few indices (and small arrays) one by one; every
    # path must give the per-index map, which tests/integration/compat_semantics checks
    # against google grain's recorded output.
    from grain_core.shuffle_cipher import IndexShuffle

    shuffle = IndexShuffle(max_index, seed=11)
    idx = np.random.default_rng(size).integers(0, max_index + 1, size=size)
    assert shuffle(idx).tolist() == [shuffle(int(i)) for i in idx]
    assert shuffle(idx.reshape(-1, 1)).shape == (size, 1)


def test_get_and_set_next_index():
    it = iter(grain.MapDataset.range(10).map(lambda x: x * 2).to_iter_dataset().map(lambda x: x + 1))
    next(it)
    next(it)
    assert grain.experimental.get_next_index(it) == 2
    grain.experimental.set_next_index(it, 7)
    assert next(it) == 15
    mixed = iter(grain.IterDataset.mix([grain.MapDataset.range(2).to_iter_dataset()] * 2))
    with pytest.raises(ValueError, match="exactly one"):
        grain.experimental.get_next_index(mixed)


def test_aliases():
    assert grain.transforms.TfRandomMap is grain.transforms.TfRandomMapTransform
    ds = grain.experimental.apply_transformations(grain.MapDataset.range(4), grain.transforms.Batch(2))
    assert [b.tolist() for b in ds] == [[0, 1], [2, 3]]
    assert grain.experimental.ThreadPrefetchDatasetIterator.__name__ == "ThreadPrefetchDatasetIterator"
