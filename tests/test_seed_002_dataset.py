"""The Dataset examples of seed 002 (API overview), run with ``import grain_core as grain``."""

import dataclasses
import sys

import numpy as np

import grain_core as grain


def test_source():
    ds = grain.MapDataset.source([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert ds[3] == 3 and len(ds) == 10

    class MySource(grain.sources.RandomAccessDataSource):
        def __init__(self, data):
            self._data = data

        def __len__(self):
            return len(self._data)

        def __getitem__(self, idx):
            return self._data[idx]

    ds = grain.MapDataset.source(MySource(["a", "b", "c", "d", "e"]))
    assert ds[1] == "b"
    assert list(ds) == ["a", "b", "c", "d", "e"]


def test_range():
    assert list(grain.MapDataset.range(10)) == list(range(10))
    assert list(grain.MapDataset.range(2, 8, 2)) == [2, 4, 6]


def test_shuffle():
    a = list(grain.MapDataset.range(10).shuffle(seed=42))
    assert sorted(a) == list(range(10)) and a == list(grain.MapDataset.range(10).shuffle(seed=42))
    ds = grain.MapDataset.range(10).seed(42).shuffle()
    assert set(ds) == set(range(10))


def test_map_lambda_and_class():
    assert list(grain.MapDataset.range(5).map(lambda x: x**2)) == [0, 1, 4, 9, 16]

    @dataclasses.dataclass
    class Normalize(grain.transforms.Map):
        mean: float
        std: float

        def map(self, element):
            return (element - self.mean) / self.std

    ds = grain.MapDataset.source([0.0, 1.0, 2.0, 3.0]).map(Normalize(mean=1.5, std=1.0))
    assert list(ds) == [-1.5, -0.5, 0.5, 1.5]


def test_random_map():
    ds = grain.MapDataset.range(5).random_map(lambda x, rng: x + rng.integers(0, 5), seed=0)
    out = list(ds)
    assert out == list(ds)
    assert all(x <= y < x + 5 for x, y in zip(range(5), out))

    @dataclasses.dataclass
    class RandomFlip(grain.transforms.RandomMap):
        def random_map(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
            if rng.random() > 0.5:
                return np.flip(image, axis=1)
            return image

    images = [np.arange(6).reshape(2, 3) + i for i in range(8)]
    ds = grain.MapDataset.source(images).seed(123).random_map(RandomFlip())
    flipped = [not np.array_equal(x, img) for x, img in zip(ds, images)]
    assert any(flipped) and not all(flipped)


def test_map_with_index():
    ds = grain.MapDataset.source(["a", "b", "c", "d"]).map_with_index(lambda i, x: f"{x}_{i}")
    assert list(ds) == ["a_0", "b_1", "c_2", "d_3"]


def test_filter_then_iter_batch():
    ds = grain.MapDataset.range(10).filter(lambda x: x % 2 == 0)
    assert ds[0] == 0 and ds[1] is None and list(ds) == [0, 2, 4, 6, 8]
    ds = grain.MapDataset.range(20).filter(lambda x: x % 3 == 0).to_iter_dataset().batch(batch_size=3)
    assert [b.tolist() for b in ds] == [[0, 3, 6], [9, 12, 15], [18]]


def test_batch():
    out = [b.tolist() for b in grain.MapDataset.range(10).batch(batch_size=3)]
    assert out == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    out = [b.tolist() for b in grain.MapDataset.range(10).batch(batch_size=3, drop_remainder=True)]
    assert out == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]

    def dict_batch(elements):
        return {"values": np.stack([e["values"] for e in elements])}

    ds = grain.MapDataset.source([{"values": np.array([i])} for i in range(6)])
    ds = ds.batch(batch_size=2, batch_fn=dict_batch)
    assert ds[1]["values"].tolist() == [[2], [3]]


def test_repeat():
    assert list(grain.MapDataset.range(3).repeat(2)) == [0, 1, 2, 0, 1, 2]
    ds = grain.MapDataset.range(5).shuffle(seed=0).repeat()
    assert len(ds) == sys.maxsize
    first, second = [ds[i] for i in range(5)], [ds[i] for i in range(5, 10)]
    assert sorted(first) == sorted(second) == list(range(5))
    ds = grain.MapDataset.range(1000).shuffle(seed=42).map(lambda x: x).batch(batch_size=32).repeat()
    for step, batch in enumerate(ds):
        if step >= 40:
            break
        assert batch.shape == ((8,) if step % 32 == 31 else (32,))
    assert step == 40


def test_slice_sharding():
    ds = grain.MapDataset.range(10)
    assert list(ds[0::4]) == [0, 4, 8]
    assert list(ds.slice(slice(0, None, 4))) == [0, 4, 8]


def test_mix():
    ds1, ds2 = grain.MapDataset.range(5), grain.MapDataset.range(5, 8)
    assert list(grain.MapDataset.mix([ds1, ds2])) == [0, 5, 1, 6, 2, 7]
    ds = grain.MapDataset.mix([grain.MapDataset.range(100), grain.MapDataset.range(100, 200)], weights=[0.7, 0.3])
    items = list(ds)
    share = sum(x < 100 for x in items) / len(items)
    assert abs(share - 0.7) < 0.02


def test_concatenate():
    ds = grain.MapDataset.concatenate([grain.MapDataset.range(3), grain.MapDataset.range(3, 7)])
    assert list(ds) == [0, 1, 2, 3, 4, 5, 6]


def test_to_iter_dataset_with_threads():
    ds = (
        grain.MapDataset.range(1000)
        .shuffle(seed=0)
        .map(lambda x: x * 2)
        .to_iter_dataset(grain.ReadOptions(num_threads=16, prefetch_buffer_size=500))
    )
    out = list(ds)
    assert sorted(out) == list(range(0, 2000, 2))
    assert out == list(grain.MapDataset.range(1000).shuffle(seed=0).map(lambda x: x * 2))


def test_iter_mix_named_components():
    def parity(p):
        return grain.MapDataset.range(40).filter(lambda x: x % 2 == p).to_iter_dataset()

    mixed = grain.IterDataset.mix([parity(0), parity(1)], weights=[0.5, 0.5])
    assert list(mixed)[:4] == [0, 1, 2, 3]
    mixed = grain.IterDataset.mix(
        {"class_0": parity(0), "class_1": parity(1)}, weights={"class_0": 0.5, "class_1": 0.5}
    )
    it = iter(mixed)
    next(it)
    state = it.get_state()
    assert set(state["parents"]) == {"class_0", "class_1"}
    rest = list(it)
    it2 = iter(mixed)
    it2.set_state(state)
    assert list(it2) == rest


def test_get_state_set_state():
    ds = grain.MapDataset.range(1000).seed(42).shuffle().to_iter_dataset()
    ds_iter = iter(ds)
    for _ in range(100):
        next(ds_iter)
    state = ds_iter.get_state()
    expected = next(ds_iter)
    ds_iter.set_state(state)
    assert next(ds_iter) == expected


def test_pipe():
    def add_noise_dataset(ds, noise_std, seed):
        return ds.random_map(lambda x, rng: x + rng.normal(scale=noise_std), seed=seed)

    ds = grain.MapDataset.range(10).pipe(add_noise_dataset, noise_std=0.1, seed=7).batch(batch_size=5)
    out = list(ds)
    assert len(out) == 2 and np.allclose(np.concatenate(out), np.arange(10), atol=1)


def test_apply():
    @dataclasses.dataclass
    class AddOne(grain.transforms.Map):
        def map(self, x):
            return x + 1

    ds = grain.MapDataset.range(9).apply([AddOne(), grain.transforms.Batch(batch_size=3)])
    assert [b.tolist() for b in ds] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_transform_classes_in_pipeline():
    @dataclasses.dataclass
    class LengthFilter(grain.transforms.Filter):
        max_length: int = 3

        def filter(self, tokens) -> bool:
            return len(tokens) <= self.max_length

    @dataclasses.dataclass
    class SplitDocument(grain.transforms.FlatMap):
        max_fan_out: int = 10
        chunk_size: int = 2

        def flat_map(self, tokens):
            return [tokens[i : i + self.chunk_size] for i in range(0, len(tokens), self.chunk_size)]

    texts = [list(range(n)) for n in range(1, 7)]
    ds = grain.MapDataset.source(texts).filter(LengthFilter(max_length=3)).to_iter_dataset()
    assert list(ds) == texts[:3]
    flat = grain.experimental.FlatMapIterDataset(grain.MapDataset.source(texts).to_iter_dataset(), SplitDocument())
    assert list(flat)[:4] == [[0], [0, 1], [0, 1], [2]]
    flat_map = grain.experimental.FlatMapMapDataset(grain.MapDataset.source(texts), SplitDocument())
    assert list(flat_map)[:4] == [[0], [0, 1], [0, 1], [2]]


def test_mix_bulk_reads_equal_single_reads():
    ds = grain.MapDataset.mix(
        [grain.MapDataset.range(100), grain.MapDataset.range(100, 130).repeat()], weights=[0.7, 0.3]
    )
    idx = [0, 5, 3, 99, 140, 141, 1000, 2]
    assert ds.__getitems__(idx) == [ds[i] for i in idx]
