"""Window shuffles pass their parent's element spec through (Grain 0.2.18's rule, recorded from
google grain: ``ShapeDtypeStruct((), int64)`` over ``range``, map and iter variants)."""

import numpy as np

import grain_core as grain
from grain_core import testing

get_spec = grain.experimental.get_element_spec


def make_map():
    return grain.experimental.WindowShuffleMapDataset(
        grain.MapDataset.range(10).batch(2), window_size=3, seed=1
    )


def make_iter():
    return grain.experimental.WindowShuffleIterDataset(
        grain.MapDataset.range(10).to_iter_dataset(), window_size=3, seed=1
    )


def test_window_shuffles_pass_the_spec_through():
    assert get_spec(make_map()).shape == (None,)
    spec = get_spec(make_iter())
    assert spec.shape == () and np.dtype(spec.dtype) == np.int64
    assert testing.check_element_spec(make_map, required=True)
    assert testing.check_element_spec(make_iter, required=True)
