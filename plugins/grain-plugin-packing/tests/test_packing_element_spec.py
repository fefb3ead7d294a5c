"""The packers say their element spec (issue 28 #4; Grain 0.2.18 raises NotImplementedError for
them): each packed feature ``(length, *trailing)`` with its dtype, and ``_segment_ids`` /
``_positions`` ``(length,)`` int32 next to it, in the structure the packers emit. The conformance
kit checks the elements against it."""

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing

S = grain.experimental.ShapeDtypeStruct
get_spec = grain.experimental.get_element_spec


class _Features(grain.transforms.Map):
    def map(self, x):
        return {
            "a": np.arange(x, dtype=np.int32),
            "b": np.ones((x, 3), np.float32),
            "c": np.int64(x),
            "extra": x,
        }

    def output_spec(self, spec):
        return {
            "a": S((None,), np.int32),
            "b": S((None, 3), np.float32),
            "c": S((), np.int64),
            "extra": S((), np.int64),
        }


def _parent():
    return grain.MapDataset.range(1, 4).repeat(3).map(_Features()).to_iter_dataset()


def make_first_fit():
    return grain.experimental.FirstFitPackIterDataset(
        _parent(), length_struct={"a": 4, "b": 4}, num_packing_bins=2
    )


def make_best_fit():
    return grain.experimental.BestFitPackIterDataset(
        _parent(), length_struct={"a": 4, "c": 2}, num_packing_bins=2, meta_features=["c"]
    )


class _OnlyA(grain.transforms.Map):
    def map(self, x):
        return {"a": x["a"]}

    def output_spec(self, spec):
        return {"a": spec["a"]}


def make_concat():
    return grain.experimental.ConcatThenSplitIterDataset(
        _parent().map(_OnlyA()), length_struct={"a": 4}
    )


def test_first_fit_spec():
    spec = get_spec(make_first_fit())
    assert spec == {
        "a": S((4,), np.int32),
        "b": S((4, 3), np.float32),
        "a_segment_ids": S((4,), np.int32),
        "a_positions": S((4,), np.int32),
        "b_segment_ids": S((4,), np.int32),
        "b_positions": S((4,), np.int32),
    }


def test_meta_features_get_no_segment_ids():
    spec = get_spec(make_best_fit())
    assert spec["c"] == S((2,), np.int64) and "c_segment_ids" not in spec


@pytest.mark.parametrize("make", [make_first_fit, make_best_fit, make_concat])
def test_packed_elements_fit_the_spec(make):
    assert testing.check_element_spec(make, required=True, count=6)


def test_concat_refuses_a_spec_with_features_length_struct_lacks():
    ds = grain.experimental.ConcatThenSplitIterDataset(_parent(), length_struct={"a": 4})
    with pytest.raises(ValueError, match="element spec has features"):
        get_spec(ds)
