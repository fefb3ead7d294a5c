"""Element specs of HuggingFaceDataSource and HuggingFaceIterDataset (issue 28 item 4), from the
dataset's features; checked against real rows with the conformance kit's check_element_spec."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
from grain_plugin_hf import HuggingFaceDataSource, HuggingFaceIterDataset

import grain_core as grain
from grain_core.testing import check_element_spec

S = grain.experimental.ShapeDtypeStruct


def _dataset():
    features = datasets.Features({
        "i": datasets.Value("int32"),
        "f": datasets.Value("float64"),
        "ok": datasets.Value("bool"),
        "s": datasets.Value("string"),
        "label": datasets.ClassLabel(num_classes=3),
        "tokens": datasets.Sequence(datasets.Value("int16")),
        "vec": datasets.Sequence(datasets.Value("float64"), length=2),
    })
    rows = {
        "i": [1, 2, 3, 4], "f": [0.5, 1.5, 2.5, 3.5], "ok": [True, False, True, False],
        "s": ["a", "bb", "c", "dd"], "label": [0, 1, 2, 0],
        "tokens": [[1, 2], [3], [4, 5, 6], [7]], "vec": [[1.0, 2.0]] * 4,
    }
    return datasets.Dataset.from_dict(rows, features=features)


def test_source_spec_follows_the_numpy_format():
    spec = grain.experimental.get_element_spec(grain.MapDataset.source(HuggingFaceDataSource(_dataset())))
    assert spec == {
        "i": S((), np.int32), "f": S((), np.float64), "ok": S((), np.bool_), "s": S((), object),
        "label": S((), np.int64), "tokens": S((None,), np.int64), "vec": S((2,), np.float32),
    }
    assert check_element_spec(
        lambda: grain.MapDataset.source(HuggingFaceDataSource(_dataset())), required=True
    )
    narrow = _dataset().with_format("numpy", columns=["i", "vec"])
    assert check_element_spec(
        lambda: grain.MapDataset.source(HuggingFaceDataSource(narrow)).batch(2), required=True
    )


def test_other_formats_give_no_spec():
    with pytest.raises(NotImplementedError, match="'arrow' format"):
        grain.experimental.get_element_spec(
            grain.MapDataset.source(HuggingFaceDataSource(_dataset().with_format("arrow")))
        )


def test_iterable_spec():
    numpy_rows = _dataset().to_iterable_dataset(num_shards=2).with_format("numpy")
    assert check_element_spec(lambda: HuggingFaceIterDataset(numpy_rows), required=True)
    plain = _dataset().select_columns(["i", "f", "s", "label"]).to_iterable_dataset()
    spec = grain.experimental.get_element_spec(HuggingFaceIterDataset(plain))
    assert spec == {"i": S((), np.int64), "f": S((), np.float64), "s": S((), object), "label": S((), np.int64)}
    assert check_element_spec(lambda: HuggingFaceIterDataset(plain), required=True)
    with pytest.raises(NotImplementedError, match="list column 'tokens'"):
        grain.experimental.get_element_spec(HuggingFaceIterDataset(_dataset().to_iterable_dataset()))
