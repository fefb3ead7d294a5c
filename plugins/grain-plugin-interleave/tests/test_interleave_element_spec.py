"""``InterleaveIterDataset``'s element spec is its first dataset's (Grain 0.2.18's rule, recorded
from google grain: ``ShapeDtypeStruct((), int64)`` over ``range`` datasets, whether given as a list
or as a ``MapDataset`` of datasets)."""

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing

get_spec = grain.experimental.get_element_spec


def _parts():
    return [grain.MapDataset.range(i, i + 5).to_iter_dataset() for i in (0, 10, 20)]


def make_list():
    return grain.experimental.InterleaveIterDataset(_parts(), cycle_length=2)


def make_map():
    return grain.experimental.InterleaveIterDataset(
        grain.MapDataset.source(_parts()), cycle_length=2
    )


@pytest.mark.parametrize("make", [make_list, make_map])
def test_spec_is_the_first_datasets_and_elements_fit(make):
    spec = get_spec(make())
    assert spec.shape == () and np.dtype(spec.dtype) == np.int64
    assert testing.check_element_spec(make, required=True)


def test_no_datasets_has_no_spec():
    with pytest.raises(NotImplementedError, match="no datasets"):
        get_spec(grain.experimental.InterleaveIterDataset([], cycle_length=1))
