"""Seed 001 (Dataset basics tutorial), run with ``import grain_core as grain``."""

import numpy as np

import grain_core as grain


def _dataset(source):
    return (
        grain.MapDataset.source(source)
        .shuffle(seed=10)
        .map(lambda x: x + 1)
        .batch(batch_size=2)
    )


def test_source_shuffle_map_batch():
    dataset = _dataset([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    batches = list(dataset)
    assert np.array_equal(dataset[0], batches[0])
    assert [len(b) for b in batches] == [2, 2, 2, 2, 2, 1]
    assert sorted(np.concatenate(batches).tolist()) == list(range(1, 12))


class MySource(grain.RandomAccessDataSource):
    def __init__(self):
        self._data = [0, 1, 2, 3, 4, 5, 6, 7]

    def __getitem__(self, idx):
        return self._data[idx]

    def __len__(self):
        return len(self._data)


def test_custom_source():
    dataset = _dataset(MySource())
    batches = list(dataset)
    assert sorted(np.concatenate(batches).tolist()) == list(range(1, 9))
    assert len(dataset) == 4


def test_epochs_past_len_are_shuffled_differently():
    dataset = _dataset(MySource())
    second_epoch = [dataset[len(dataset) + i] for i in range(len(dataset))]
    assert sorted(np.concatenate(second_epoch).tolist()) == list(range(1, 9))
    assert any(not np.array_equal(dataset[len(dataset) + i], dataset[i]) for i in range(4))
    unshuffled = grain.MapDataset.source(MySource()).map(lambda x: x + 1)
    assert unshuffled[len(unshuffled) + 2] == unshuffled[2]


def test_filter_returns_none_for_removed():
    dataset = _dataset(MySource())
    filtered = dataset.filter(lambda e: (e[0] + e[1]) % 2 == 0)
    assert len(filtered) == len(dataset)
    items = [filtered[i] for i in range(len(filtered))]
    for got, full in zip(items, dataset):
        if (full[0] + full[1]) % 2 == 0:
            assert np.array_equal(got, full)
        else:
            assert got is None


def test_sharding_by_slicing():
    dataset = _dataset([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    shard0, shard1 = dataset[0::2], dataset[1::2]
    assert len(shard0) == 3 and len(shard1) == 3
    assert np.array_equal(shard0[0], dataset[0])
    assert np.array_equal(shard0[1], dataset[2])
    together = sorted(np.concatenate(list(shard0) + list(shard1)).tolist())
    assert together == list(range(1, 12))


def test_to_iter_dataset_with_read_options():
    dataset = _dataset([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    sharded = dataset[0::2]
    iter_dataset = sharded.to_iter_dataset(grain.ReadOptions(num_threads=16, prefetch_buffer_size=500))
    got = list(iter_dataset)
    assert all(np.array_equal(a, b) for a, b in zip(got, sharded))


def test_iterator_checkpoint():
    dataset = _dataset(MySource())
    dataset_iter = iter(dataset)
    assert isinstance(dataset_iter, grain.DatasetIterator)
    next(dataset_iter)
    checkpoint = dataset_iter.get_state()
    second = next(dataset_iter)
    dataset_iter.set_state(checkpoint)
    assert np.array_equal(next(dataset_iter), second)
