"""Grain 0.2.18's packing unit tests for nested and non-sequence meta features, ported to
grain_core's public API (plain pytest; needs the packing plugin: ``integration`` session).

Ported from ``grain/_src/python/dataset/transformations/testing_util.py``
(``BaseFirstFitPackIterDatasetTest``, run for the first-fit and best-fit packers):
``test_nested_feature`` (marked as a meta feature; unmarked, grain_core packs the nested leaves
with their own segment ids where Grain raises: docs/differences.md), ``test_non_sequence_meta_feature``
and ``test_non_sequence_meta_feature_variable_shapes`` (with and without numpy inputs), plus a
checkpoint round trip with a non-sequence meta feature.
"""

from __future__ import annotations

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing

pytestmark = pytest.mark.timeout(300)

PACKERS = [grain.experimental.FirstFitPackIterDataset, grain.experimental.BestFitPackIterDataset]


@pytest.mark.parametrize("packer", PACKERS, ids=["first_fit", "best_fit"])
def test_nested_feature_marked_as_meta(packer):
    rng = np.random.default_rng(42)
    elements = [
        dict(row=rng.integers(0, 10, size=rng.integers(5, 30)), nested_feature=dict(inner_value=0))
        for _ in range(100)
    ]
    ds = packer(
        grain.MapDataset.source(elements).repeat().to_iter_dataset(),
        num_packing_bins=4,
        length_struct=dict(row=100, nested_feature=dict(inner_value=100)),
        meta_features=["nested_feature"],
    )
    row = next(iter(ds))
    assert set(row) == {"row", "row_segment_ids", "row_positions", "nested_feature"}
    assert set(row["nested_feature"]) == {"inner_value"}
    assert row["nested_feature"]["inner_value"].shape == (100,)


def _images(shapes, as_np):
    out = []
    for i, shape in enumerate(shapes, 1):
        el = {
            "inputs": np.asarray([i]),
            "targets": np.asarray([10 * i]),
            "image": np.ones(shape, dtype=np.int32) * i,
        }
        if not as_np:
            el["inputs"], el["targets"] = el["inputs"].tolist(), el["targets"].tolist()
        out.append(el)
    return out


@pytest.mark.parametrize("as_np", [True, False], ids=["numpy", "lists"])
@pytest.mark.parametrize("packer", PACKERS, ids=["first_fit", "best_fit"])
@pytest.mark.parametrize(
    "shapes",
    [[(2, 2, 3)] * 3, [(2, 1, 3, 3), (1, 1, 3, 3), (3, 1, 3, 3)]],
    ids=["same_shapes", "variable_shapes"],
)
def test_non_sequence_meta_feature(packer, as_np, shapes):
    ds = packer(
        grain.MapDataset.source(_images(shapes, as_np)).to_iter_dataset(),
        length_struct={"inputs": 3, "targets": 3},
        num_packing_bins=1,
        meta_features=["image"],
    )
    (row,) = list(ds)
    expected = {
        "inputs": [1, 2, 3],
        "targets": [10, 20, 30],
        "inputs_segment_ids": [1, 2, 3],
        "targets_segment_ids": [1, 2, 3],
        "inputs_positions": [0, 0, 0],
        "targets_positions": [0, 0, 0],
    }
    assert set(row) == {*expected, "image"}
    for k, v in expected.items():
        assert row[k].tolist() == v, k
    assert isinstance(row["image"], list) and len(row["image"]) == 3
    for i, (img, shape) in enumerate(zip(row["image"], shapes), 1):
        np.testing.assert_array_equal(img, np.ones(shape, dtype=np.int32) * i)


def _make_image_packing():
    elements = [
        {"t": np.arange(n), "image": np.full((2, 2), n, dtype=np.int32)} for n in (1, 3, 2, 4, 1, 2)
    ]
    return grain.experimental.FirstFitPackIterDataset(
        grain.MapDataset.source(elements).repeat(2).to_iter_dataset(),
        length_struct={"t": 5},
        num_packing_bins=2,
        meta_features=["image"],
    )


def test_non_sequence_meta_feature_checkpointing():
    testing.assert_equal_output_after_checkpoint(_make_image_packing())
