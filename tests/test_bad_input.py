"""Bad input gets a ValueError / TypeError that says what is wrong."""

import numpy as np
import pytest

import grain_core as grain
from grain_core import MapDataset


def test_non_integer_index():
    with pytest.raises(TypeError, match="integers or slices"):
        MapDataset.range(5)["a"]
    with pytest.raises(TypeError, match="integers or slices"):
        MapDataset.range(5)[1.5]


def test_slice_step_zero():
    with pytest.raises(ValueError, match="step cannot be zero"):
        MapDataset.range(5)[::0]


@pytest.mark.parametrize("size", [0, -1])
def test_batch_size_not_positive(size):
    with pytest.raises(ValueError, match="batch_size must be positive"):
        MapDataset.range(5).batch(size)
    with pytest.raises(ValueError, match="batch_size must be positive"):
        MapDataset.range(5).to_iter_dataset().batch(size)
    with pytest.raises(ValueError, match="batch_size"):
        grain.transforms.Batch(size)


def test_batch_size_wrong_type():
    with pytest.raises(TypeError, match="batch_size"):
        MapDataset.range(5).batch(2.0)


def test_mix_weights():
    a, b = MapDataset.range(5), MapDataset.range(5)
    with pytest.raises(ValueError, match=">= 0"):
        MapDataset.mix([a, b], weights=[1, -1])
    with pytest.raises(ValueError, match="2 weights for 3 datasets"):
        MapDataset.mix([a, b, a], weights=[1, 1])
    with pytest.raises(ValueError, match="Must specify all non-zero proportions for mixing"):
        MapDataset.mix([a, b], weights=[0, 0])  # Grain refuses any zero weight
    with pytest.raises(ValueError, match="Must specify all non-zero proportions for mixing"):
        MapDataset.mix([a, b], weights=[1, 0])
    with pytest.raises(ValueError, match="weights"):
        grain.IterDataset.mix([a.to_iter_dataset(), b.to_iter_dataset()], weights=[1, float("nan")])


def test_repeat_zero_and_infinite():
    with pytest.raises(ValueError, match="num_epochs must be positive"):
        MapDataset.range(5).repeat(0)
    with pytest.raises(ValueError, match="infinite"):
        MapDataset.range(5).repeat().repeat(2)


def test_seed_out_of_range():
    # As in Grain: negative seeds are refused everywhere; shuffle seeds must fit 32 bits, while
    # seed() and random_map take any non-negative int (NumPy's SeedSequence / Philox do).
    for seed in (-1, 2**32):
        with pytest.raises(ValueError, match=r"between 0 and 2\*\*32-1 \(got seed="):
            MapDataset.range(5).shuffle(seed=seed)
    with pytest.raises(ValueError, match=r"between 0 and 2\*\*32-1"):
        MapDataset.range(5).seed(-1)
    with pytest.raises(ValueError, match=r"between 0 and 2\*\*32-1"):
        MapDataset.range(5).to_iter_dataset().random_map(lambda x, r: x, seed=-1)
    assert len(list(MapDataset.range(5).seed(2**32).shuffle())) == 5
    assert list(MapDataset.range(3).random_map(lambda x, r: x, seed=2**40)) == [0, 1, 2]


def test_seed_wrong_type():
    with pytest.raises(TypeError, match="seed must be an integer"):
        MapDataset.range(5).seed("1")


def test_batch_shape_mismatch_names_leaf_and_shapes():
    ds = MapDataset.source([{"image": np.zeros((2, 2))}, {"image": np.zeros((3, 2))}]).batch(2)
    with pytest.raises(ValueError, match=r"leaf \['image'\].*\(2, 2\).*\(3, 2\)"):
        ds[0]
    ds = MapDataset.source([np.zeros(2), np.zeros(3)]).to_iter_dataset().batch(2)
    with pytest.raises(ValueError, match=r"Cannot stack leaf <root>"):
        list(ds)


def test_batch_structure_mismatch():
    ds = MapDataset.source([{"a": 1}, {"b": 2}]).batch(2)
    with pytest.raises(ValueError, match="different structures"):
        ds[0]


def test_apply_wrong_kind():
    with pytest.raises(TypeError, match="transformation 1 is a str"):
        MapDataset.range(5).apply([grain.transforms.Batch(2), "nope"])


def test_transform_of_wrong_kind_to_method():
    class F(grain.transforms.Filter):
        def filter(self, x):
            return True

    with pytest.raises(TypeError, match="map\\(\\) expects a Map transform or a callable, got a F"):
        MapDataset.range(5).map(F())
    with pytest.raises(TypeError, match="not callable|expects a Map"):
        MapDataset.range(5).map(3)


def test_source_without_len():
    with pytest.raises(TypeError, match="Sequence or a RandomAccessDataSource"):
        MapDataset.source(iter([1, 2]))


def test_read_options_validation():
    with pytest.raises(ValueError, match="num_threads must be non-negative"):
        grain.ReadOptions(num_threads=-1)
    with pytest.raises(TypeError, match="to_iter_dataset|read_options"):
        MapDataset.range(3).to_iter_dataset(read_options=4)


def test_shuffle_infinite():
    with pytest.raises(ValueError, match="shuffle before repeat"):
        MapDataset.range(5).repeat().shuffle(seed=1)


def test_flat_map_over_fan_out():
    class Split(grain.transforms.FlatMap):
        max_fan_out = 2

        def flat_map(self, x):
            return [x] * 3

    ds = grain.experimental.FlatMapMapDataset(MapDataset.range(3), Split())
    with pytest.raises(ValueError, match="more than its max_fan_out=2"):
        ds[0]
