"""Element spec of TfdsDataSource (issue 28 item 4): from the feature description, no record read."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow_datasets as tfds
from grain_plugin_tfds import TfdsDataSource

import grain_core as grain
from grain_core.testing import check_element_spec

NAME = "grain_tiny_mnist"


def test_the_spec_comes_from_the_features(tfds_data_dir):
    src = TfdsDataSource(NAME, split="test", data_dir=tfds_data_dir)
    S = grain.experimental.ShapeDtypeStruct
    expected = {"image": S((28, 28, 1), np.uint8), "label": S((), np.int64), "id": S((), np.int64)}
    assert src.element_spec == expected
    assert grain.experimental.get_element_spec(grain.MapDataset.source(src)) == expected


def test_records_fit_the_spec(tfds_data_dir):
    def make():
        return grain.MapDataset.source(TfdsDataSource(NAME, split="train", data_dir=tfds_data_dir))

    assert check_element_spec(make, required=True, count=6)
    assert check_element_spec(lambda: make().batch(4, drop_remainder=True), required=True)


def test_decoders_give_no_spec(tfds_data_dir):
    src = TfdsDataSource(
        NAME, split="test", data_dir=tfds_data_dir, decoders={"image": tfds.decode.SkipDecoding()}
    )
    with pytest.raises(NotImplementedError, match="decoders="):
        grain.experimental.get_element_spec(grain.MapDataset.source(src))
