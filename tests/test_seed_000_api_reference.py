"""Every example of seed 000 (the Dataset API reference), run with ``import grain_core as grain``."""

import sys

import numpy as np
import pytest

import grain_core as grain
from grain_core import MapDataset


def test_concatenate():
    ds1 = MapDataset.range(3)
    ds2 = MapDataset.range(3, 8)
    assert list(MapDataset.concatenate([ds1, ds2])) == [0, 1, 2, 3, 4, 5, 6, 7]


def test_mix():
    ds1 = MapDataset.range(5)
    ds2 = MapDataset.range(7, 10)
    assert list(MapDataset.mix([ds1, ds2])) == [0, 7, 1, 8, 2, 9]


@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 9, 3), (9, 2, -2), (5, 5), (5, 0), (-3, 3)])
def test_range_matches_builtin(args):
    assert list(MapDataset.range(*args)) == list(range(*args))


def test_source_sequence():
    assert list(MapDataset.source([1, 2, 3, 4, 5])) == [1, 2, 3, 4, 5]


def test_batch():
    out = list(MapDataset.range(5).batch(batch_size=2))
    assert [b.tolist() for b in out] == [[0, 1], [2, 3], [4]]


def test_filter():
    ds = MapDataset.range(5).filter(lambda x: x % 2 == 0)
    assert ds[2] == 2
    assert ds[1] is None
    assert list(ds) == [0, 2, 4]


def test_map():
    assert list(MapDataset.range(5).map(lambda x: x + 10)) == [10, 11, 12, 13, 14]


def test_map_with_index():
    ds = MapDataset.source(["a", "b", "c", "d"]).map_with_index(lambda i, x: x + str(i))
    assert list(ds) == ["a0", "b1", "c2", "d3"]


def test_random_map():
    ds = MapDataset.range(5).random_map(lambda x, rng: x + rng.integers(5, 10))
    assert set(ds).issubset(set(range(5, 15)))
    assert list(ds) == list(ds)  # deterministic


def test_repeat():
    assert list(MapDataset.range(5).repeat(2)) == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    ds = MapDataset.range(5).repeat()
    assert len(ds) == sys.maxsize
    assert ds[11111] == 1


def test_shuffle():
    ds = MapDataset.range(5).shuffle()
    assert set(ds) == {0, 1, 2, 3, 4}
    many = MapDataset.range(100).shuffle()
    assert list(many) != list(range(100))


def test_slice():
    ds = MapDataset.range(5)
    assert list(ds.slice(slice(1, 3))) == [1, 2]
    assert list(ds.slice(slice(1, None, 2))) == [1, 3]
    assert list(ds.slice(slice(1, 10, 2))) == list(ds[1:10:2])


def test_seed_examples():
    base = MapDataset.range(100)
    # Example 1/2: each random transformation derives a different seed from the pipeline seed.
    a = base.seed(7).shuffle().random_map(lambda x, rng: int(rng.integers(1000)))
    b = base.seed(7).shuffle().random_map(lambda x, rng: int(rng.integers(1000)))
    assert list(a) == list(b)
    c = base.seed(8).shuffle().random_map(lambda x, rng: int(rng.integers(1000)))
    assert list(a) != list(c)
    # Example 3: an explicit seed wins over the pipeline seed.
    e1 = base.seed(1).random_map(lambda x, rng: int(rng.integers(1000)), seed=5)
    e2 = base.seed(2).random_map(lambda x, rng: int(rng.integers(1000)), seed=5)
    assert list(e1) == list(e2)
    # Example 4: a later seed() overrides for what follows only.
    f1 = base.seed(1).shuffle().seed(3).random_map(lambda x, rng: int(rng.integers(1000)))
    f2 = base.seed(2).shuffle().seed(3).random_map(lambda x, rng: int(rng.integers(1000)))
    assert [f1[i] for i in range(10)] == [f2[i] for i in range(10)]
    assert list(base.seed(1).shuffle()) != list(base.seed(2).shuffle())


def test_seed_mix_derives_from_both():
    ds1 = MapDataset.range(50).seed(1).shuffle()
    ds2 = MapDataset.range(50).seed(2).shuffle()
    ds3 = MapDataset.range(50).seed(3).shuffle()
    rm = lambda x, rng: int(rng.integers(10**6))  # noqa: E731
    m12 = MapDataset.mix([ds1, ds2]).random_map(rm)
    m13 = MapDataset.mix([ds1, ds3]).random_map(rm)
    assert m12._default_seed != m13._default_seed


def test_pipe_with_function():
    def add(ds, n):
        return ds.map(lambda x: x + n)

    assert list(MapDataset.range(3).pipe(add, n=10)) == [10, 11, 12]


def test_to_iter_dataset_allow_nones():
    ds = MapDataset.range(5).filter(lambda x: x % 2 == 0)
    assert list(ds.to_iter_dataset(allow_nones=True)) == [0, None, 2, None, 4]


def test_iter_dataset_examples():
    base = lambda: MapDataset.range(5).to_iter_dataset()  # noqa: E731
    assert [b.tolist() for b in base().batch(batch_size=2)] == [[0, 1], [2, 3], [4]]
    assert list(base().filter(lambda x: x % 2 == 0)) == [0, 2, 4]
    assert list(base().map(lambda x: x + 10)) == [10, 11, 12, 13, 14]
    assert list(base().map_with_index(lambda i, x: (i, 2**x))) == [(0, 1), (1, 2), (2, 4), (3, 8), (4, 16)]
    assert set(base().random_map(lambda x, rng: x + rng.integers(5, 10))).issubset(set(range(5, 15)))


def test_iter_mix():
    ds1 = MapDataset.range(5).to_iter_dataset()
    ds2 = MapDataset.range(7, 10).to_iter_dataset()
    assert list(grain.IterDataset.mix([ds1, ds2])) == [0, 7, 1, 8, 2, 9, 3]


def test_iter_seed_examples():
    rm = lambda x, rng: int(rng.integers(10**6))  # noqa: E731
    base = MapDataset.range(20).to_iter_dataset()
    assert list(base.seed(1).random_map(rm)) == list(base.seed(1).random_map(rm))
    assert list(base.seed(1).random_map(rm)) != list(base.seed(2).random_map(rm))
    two = list(base.seed(1).random_map(rm).random_map(rm))
    one = list(base.seed(1).random_map(rm))
    assert two != one
    assert list(base.seed(1).random_map(rm, seed=9)) == list(base.seed(2).random_map(rm, seed=9))


def test_dataset_iterator_state_and_context_manager():
    ds = MapDataset.range(10).to_iter_dataset()
    with iter(ds) as it:
        assert isinstance(it, grain.DatasetIterator)
        next(it)
        state = it.get_state()
        a = next(it)
        it.set_state(state)
        assert next(it) == a


def test_batch_pytree():
    ds = MapDataset.source([{"x": np.full((2,), i), "y": (i, float(i))} for i in range(5)]).batch(2)
    b = ds[0]
    assert b["x"].shape == (2, 2)
    assert b["y"][0].tolist() == [0, 1]
    assert b["y"][1].dtype == np.float64


def test_batch_fn():
    ds = MapDataset.range(6).batch(3, batch_fn=lambda xs: sum(xs))
    assert list(ds) == [3, 12]


def test_batch_of_bytes_keeps_every_byte():
    records = [b"ab\x00", b"\x00\x00", b"c"]
    batch = MapDataset.source(records).batch(3)[0]
    assert batch.dtype == object and batch.tolist() == records
    nested = MapDataset.source([{"r": r} for r in records]).to_iter_dataset().batch(2)
    assert [b["r"].tolist() for b in nested] == [records[:2], records[2:]]
