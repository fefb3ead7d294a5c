"""Grain 0.2.18's batch unit tests, ported to grain_core's public API (plain pytest).

Ported from ``grain/_src/python/dataset/transformations/batch_test.py``:
``MakeBatchTest`` (zero values, one value, two values, different shapes / structures; Grain's
private ``make_batch`` is ``grain_core.tree.stack`` here), ``BatchAndPadTest`` (every case),
``BatchMapDatasetTest`` (``test_batch_size_2`` with and without jax, ``test_custom_batch_fn``,
``test_batch_size_3``, ``test_epoch_boundaries*``, ``test_element_spec*``) and
``BatchIterDatasetTest`` (``test_batch_size_2``, ``test_custom_batch_fn``, ``test_batch_size_3*``,
``test_element_spec``, ``test_element_spec_nested``, ``test_get_next_index``,
``test_set_next_index``). Not ported: ``test_batch_after_filter_raises_error`` (grain_core allows
batching a filtered MapDataset: docs/differences.md), the parallel / shared-memory batching tests
(Grain's experiment flags, not public API).

"Without jax" runs set ``grain_core.tree``'s mode to Grain's fallback, as Grain's tests reload
``tree_lib`` with jax hidden.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import grain_core as grain
from grain_core import tree

pytestmark = pytest.mark.timeout(120)

S = grain.experimental.ShapeDtypeStruct
SAME = "Expected all input elements to have the same structure but got:"


@pytest.fixture(params=[True, False], ids=["jax", "no_jax"])
def use_jax(request, monkeypatch):
    if not request.param:
        monkeypatch.setattr(tree, "_mode", "fallback")
    return request.param


class MapWithElementSpecInference(grain.transforms.Map):
    def map(self, element):
        return {"parsed": np.full((10, 10), element), "nested": {"record": str(element)}}

    def output_spec(self, input_spec):
        assert input_spec == S(shape=(), dtype=np.int64), input_spec
        return {
            "parsed": S(shape=(10, 10), dtype=np.int64),
            "nested": {"record": S(shape=(), dtype=str)},
        }


class CustomBatchFn:
    """Grain's ``BatchFn`` protocol: a callable with ``output_spec``."""

    def __call__(self, elements):
        return {"batch": tree.stack(elements)}

    def output_spec(self, input_spec, batch_size, drop_remainder):
        dim = batch_size if drop_remainder else None
        return {"batch": tree.map_structure(lambda s: S((dim, *s.shape), s.dtype), input_spec)}


# ----- MakeBatchTest -----------------------------------------------------------------------------


def test_batch_zero_values_error():
    with pytest.raises(ValueError):
        tree.stack([])


def test_batch_single_and_two_values():
    assert tree.stack([np.asarray([1, 2, 3])]).shape == (1, 3)
    assert tree.stack([np.asarray([1, 2, 3]), np.asarray([4, 5, 6])]).shape == (2, 3)
    out = tree.stack([np.asarray([1, 2, 3]), [4, 5, 6]])
    assert isinstance(out, np.ndarray) and out.shape == (2, 3)


@pytest.mark.parametrize(
    "values",
    [
        [{"a": np.asarray([1, 2, 3])}, {"a": np.asarray([4, 5])}],
        [{"a": np.asarray([1, 2, 3])}, {"b": np.asarray(0.5)}],
        [{"a": np.asarray([1, 2, 3])}, {"b": np.asarray(0.5)}, {"c": np.asarray(True)}],
    ],
    ids=["shapes", "structures", "three_structures"],
)
def test_batch_different_shapes_or_structures_error(values, use_jax):
    with pytest.raises(ValueError, match=SAME):
        tree.stack(values)


# ----- BatchAndPadTest ---------------------------------------------------------------------------

_F = np.float32


@pytest.mark.parametrize(
    "values, batch_size, pad_value, expected",
    [
        ([1, 2, 3], 3, 0, np.array([1, 2, 3])),
        ([1, 2, 3], 5, 1, np.array([1, 2, 3, 1, 1])),
        (
            [
                {"a": np.array([1, 2, 3]), "b": np.array([[1.2], [0.2]], dtype=_F)},
                {"a": np.array([4, 5, 6]), "b": np.array([[323.1], [2222.3]], dtype=_F)},
            ],
            4,
            0,
            {
                "a": np.array([[1, 2, 3], [4, 5, 6], [0, 0, 0], [0, 0, 0]]),
                "b": np.array(
                    [[[1.2], [0.2]], [[323.1], [2222.3]], [[0.0], [0.0]], [[0.0], [0.0]]], dtype=_F
                ),
            },
        ),
        (
            [
                {"aa": {"a": np.array([1, 2, 3])}, "b": np.array([[1.2], [0.2]], dtype=_F)},
                {"aa": {"a": np.array([4, 5, 6])}, "b": np.array([[323.1], [2222.3]], dtype=_F)},
            ],
            4,
            0,
            {
                "aa": {"a": np.array([[1, 2, 3], [4, 5, 6], [0, 0, 0], [0, 0, 0]])},
                "b": np.array(
                    [[[1.2], [0.2]], [[323.1], [2222.3]], [[0.0], [0.0]], [[0.0], [0.0]]], dtype=_F
                ),
            },
        ),
    ],
    ids=["scalars", "scalars_padded", "dicts_padded", "nested_dicts_padded"],
)
def test_batch_and_pad_correct_output(values, batch_size, pad_value, expected):
    np.testing.assert_equal(
        grain.experimental.batch_and_pad(values, batch_size=batch_size, pad_value=pad_value),
        expected,
    )


def test_batch_and_pad_zero_values():
    with pytest.raises(ValueError):
        grain.experimental.batch_and_pad([], batch_size=1)


# ----- BatchMapDatasetTest -----------------------------------------------------------------------

_ARRAYS = [
    np.asarray([1, 2, 3]),
    np.asarray([4, 5, 6]),
    np.asarray([7, 8, 9]),
    np.asarray([10, 11, 12]),
]


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: grain.MapDataset.range(0, 10), [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]),
        (lambda: grain.MapDataset.source(_ARRAYS), [_ARRAYS[:2], _ARRAYS[2:]]),
    ],
    ids=["range", "source"],
)
def test_map_batch_size_2(make, expected, use_jax):
    ds = make().batch(2)
    assert len(ds) == len(expected)
    np.testing.assert_allclose([ds[i] for i in range(len(ds))], expected)
    it = make().to_iter_dataset().batch(2)
    np.testing.assert_allclose(list(it), expected)


@pytest.mark.parametrize("kind", ["map", "iter"])
def test_custom_batch_fn(kind):
    ds = grain.MapDataset.source([{"a": f"element_{i}"} for i in range(10)])
    if kind == "iter":
        ds = ds.to_iter_dataset()
    ds = ds.batch(2, batch_fn=lambda xs: tree.map_structure(lambda *x: tuple(x), *xs))
    expected = [{"a": (f"element_{i}", f"element_{i + 1}")} for i in range(0, 10, 2)]
    assert (list(ds) if kind == "iter" else [ds[i] for i in range(len(ds))]) == expected


@pytest.mark.parametrize("drop_remainder", [True, False])
@pytest.mark.parametrize("kind", ["map", "iter"])
def test_batch_size_3(drop_remainder, kind):
    expected = [[0, 1, 2], [3, 4, 5], [6, 7, 8]] + ([] if drop_remainder else [[9]])
    ds = grain.MapDataset.range(0, 10)
    if kind == "iter":
        ds = ds.to_iter_dataset()
    out = list(ds.batch(3, drop_remainder=drop_remainder))
    assert [b.tolist() for b in out] == expected


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_epoch_boundaries(drop_remainder):
    ds = grain.MapDataset.range(0, 10).batch(3, drop_remainder=drop_remainder)
    epoch = [[0, 1, 2], [3, 4, 5], [6, 7, 8]] + ([] if drop_remainder else [[9]])
    assert len(ds) == len(epoch)
    assert [ds[i].tolist() for i in range(4 * len(ds))] == 4 * epoch
    after = ds.repeat(2)
    assert [after[i].tolist() for i in range(len(after))] == 2 * epoch


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_epoch_boundaries_repeat_before_batch(drop_remainder):
    ds = grain.MapDataset.range(0, 10).repeat(2).batch(3, drop_remainder=drop_remainder)
    expected = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 0, 1], [2, 3, 4], [5, 6, 7]]
    if not drop_remainder:
        expected.append([8, 9])
    assert [ds[i].tolist() for i in range(len(ds))] == expected


@pytest.mark.parametrize("kind", ["map", "iter"])
@pytest.mark.parametrize(
    "batch_size, drop_remainder, expected_shape",
    [(2, False, (None,)), (3, True, (3,))],
)
def test_element_spec(kind, batch_size, drop_remainder, expected_shape):
    ds = grain.MapDataset.range(0, 10)
    if kind == "iter":
        ds = ds.to_iter_dataset()
    spec = grain.experimental.get_element_spec(ds.batch(batch_size, drop_remainder=drop_remainder))
    assert spec.shape == expected_shape and spec.dtype == np.int64


def test_element_spec_nested():
    ds = grain.MapDataset.range(0, 10).to_iter_dataset().map(MapWithElementSpecInference())
    spec = grain.experimental.get_element_spec(ds.batch(3, drop_remainder=True))
    assert spec == {
        "nested": {"record": S(shape=(3,), dtype=str)},
        "parsed": S(shape=(3, 10, 10), dtype=np.int64),
    }


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_element_spec_custom_batch_fn(drop_remainder):
    ds = grain.MapDataset.range(0, 10).batch(
        3, drop_remainder=drop_remainder, batch_fn=CustomBatchFn()
    )
    assert grain.experimental.get_element_spec(ds) == {
        "batch": S((3 if drop_remainder else None,), np.int64)
    }
    partial = functools.partial(CustomBatchFn())
    ds = grain.MapDataset.range(0, 10).batch(3, batch_fn=partial)
    assert grain.experimental.get_element_spec(ds) == {"batch": S((None,), np.int64)}


_NEXT_INDEX_CASES = [
    (2, False, [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]),
    (3, False, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]),
    (3, True, [[0, 1, 2], [3, 4, 5], [6, 7, 8]]),
]


@pytest.mark.parametrize("batch_size, drop_remainder, expected", _NEXT_INDEX_CASES)
def test_get_next_index(batch_size, drop_remainder, expected):
    ds = (
        grain.MapDataset.range(0, 10)
        .to_iter_dataset()
        .batch(batch_size, drop_remainder=drop_remainder)
    )
    it = iter(ds)
    assert grain.experimental.get_next_index(it) == 0
    for i, _ in enumerate(it):
        assert grain.experimental.get_next_index(it) == i + 1


@pytest.mark.parametrize("batch_size, drop_remainder, expected", _NEXT_INDEX_CASES)
def test_set_next_index(batch_size, drop_remainder, expected):
    ds = (
        grain.MapDataset.range(0, 10)
        .to_iter_dataset()
        .batch(batch_size, drop_remainder=drop_remainder)
    )
    for i in reversed(range(len(expected))):
        it = iter(ds)
        grain.experimental.set_next_index(it, i)
        np.testing.assert_allclose(next(it), expected[i])
