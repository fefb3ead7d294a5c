"""Seed 002's DataLoader, load, sharding and IndexSampler examples, run on local in-memory data.

The ArrayRecord-backed versions are in tests/integration/test_seed_dataloader.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import grain_core as grain


class MySource(grain.sources.RandomAccessDataSource):
    def __init__(self, data):
        self._data = data

    def __len__(self):
        return len(self._data)

    def __getitem__(self, idx):
        return self._data[idx]


def make_records(n):
    return [np.arange(8, dtype=np.int32).tobytes() + i.to_bytes(4, "little") for i in range(n)]


@dataclasses.dataclass
class DecodeAndAugment(grain.transforms.Map):
    def map(self, record: bytes):
        arr = np.frombuffer(record, dtype=np.int32)
        return {"x": arr[:8], "id": arr[8]}


@dataclasses.dataclass
class Decode(grain.transforms.Map):
    def map(self, record: bytes):
        return int(np.frombuffer(record, dtype=np.int32)[8])


@dataclasses.dataclass
class RandomCrop(grain.transforms.RandomMap):
    crop_size: int = 4

    def random_map(self, image, rng):
        h, w = image.shape[:2]
        top = rng.integers(0, h - self.crop_size + 1)
        left = rng.integers(0, w - self.crop_size + 1)
        return image[top : top + self.crop_size, left : left + self.crop_size]


def test_dataloader_example():
    source = MySource(make_records(1000))
    sampler = grain.IndexSampler(
        num_records=len(source),
        shard_options=grain.ShardByJaxProcess(),
        shuffle=True,
        num_epochs=None,
        seed=42,
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[DecodeAndAugment(), grain.transforms.Batch(batch_size=128, drop_remainder=True)],
        worker_count=0,
        worker_buffer_size=2,
    )
    iterator = iter(loader)
    state = iterator.get_state()
    assert isinstance(state, bytes)
    batches = [next(iterator) for _ in range(10)]  # crosses epochs: infinite sampler
    assert all(b["x"].shape == (128, 8) and b["id"].shape == (128,) for b in batches)
    ids = np.concatenate([b["id"] for b in batches])
    assert sorted(ids[:1000].tolist()) == list(range(1000))
    iterator.set_state(state)
    again = next(iterator)
    np.testing.assert_array_equal(again["id"], batches[0]["id"])
    iterator.close()


def test_dataloader_random_crop_example():
    images = MySource([np.full((8, 8), i, dtype=np.int32) for i in range(40)])
    sampler = grain.IndexSampler(num_records=40, shuffle=True, num_epochs=1, seed=0)
    loader = grain.DataLoader(
        data_source=images,
        sampler=sampler,
        operations=[RandomCrop(crop_size=4), grain.transforms.Batch(32)],
        worker_count=0,
    )
    batches = list(loader)
    assert [b.shape for b in batches] == [(32, 4, 4), (8, 4, 4)]


def test_load_example():
    source = MySource(make_records(200))
    loader = grain.load(
        source=source,
        num_epochs=10,
        shuffle=True,
        seed=0,
        shard_options=grain.ShardByJaxProcess(),
        transformations=[Decode()],
        batch_size=64,
        drop_remainder=True,
        worker_count=0,
    )
    batches = list(loader)
    assert len(batches) == 2000 // 64
    assert all(b.shape == (64,) for b in batches)
    flat = np.concatenate(batches).tolist()
    assert sorted(flat[:200]) == list(range(200))
    assert flat[:200] != flat[200:400]


def test_load_defaults_and_bad_batch_size():
    it = iter(grain.load(list(range(5))))  # num_epochs=None: infinite
    assert [next(it) for _ in range(12)] == [0, 1, 2, 3, 4] * 2 + [0, 1]
    it.close()
    for bad in (0, -4):
        with pytest.raises(ValueError, match="batch_size"):
            grain.load(list(range(5)), batch_size=bad)
    with pytest.raises(ValueError, match="seed"):
        grain.load(list(range(5)), shuffle=True)


def test_load_sharded():
    outs = [
        np.concatenate(
            list(grain.load(list(range(30)), num_epochs=1, batch_size=4,
                            shard_options=grain.ShardOptions(i, 3)))
        ).tolist()
        for i in range(3)
    ]
    assert outs == [list(range(0, 10)), list(range(10, 20)), list(range(20, 30))]


def test_sharding_example():
    assert grain.NoSharding().shard_count == 1
    shard = grain.ShardByJaxProcess(drop_remainder=True)
    assert shard.drop_remainder
    shard = grain.ShardOptions(shard_index=1, shard_count=4, drop_remainder=False)
    ds = grain.MapDataset.source(MySource(list(range(10)))).shuffle(seed=0)[
        shard.shard_index :: shard.shard_count
    ]
    assert len(ds) == 3
    sampler = grain.IndexSampler(
        num_records=10, shard_options=grain.ShardByJaxProcess(), shuffle=True, seed=0,
        num_epochs=1,
    )
    assert sorted(m.record_key for m in sampler) == list(range(10))
