"""Element specs of ParquetIterDataset and ParquetDataSource (issue 28 item 4), from the schema."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from grain_plugin_parquet import ParquetDataSource, ParquetIterDataset

import grain_core as grain
from grain_core.testing import check_element_spec


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "a.parquet")
    table = pa.table({
        "i": pa.array([1, 2, 3, 4], pa.int32()),
        "n": pa.array([1, None, 3, 4], pa.int64()),  # nulls in the first row group only
        "f": [1.0, 2.0, 3.0, 4.0],
        "s": ["a", "b", "c", "d"],
        "b": [b"x", b"y", b"z", b"w"],
        "l": pa.array([[1, 2], [3], [], [4]], pa.list_(pa.int64())),
        "ok": [True, False, True, True],
    })
    pq.write_table(table, p, row_group_size=2)
    return p


def test_the_spec_comes_from_the_schema(path):
    spec = grain.experimental.get_element_spec(ParquetIterDataset(path))
    S = grain.experimental.ShapeDtypeStruct
    assert spec == {
        "i": S((), np.int32), "n": S((), object), "f": S((), np.float64), "s": S((), object),
        "b": S((), object), "l": S((None,), np.int64), "ok": S((), np.bool_),
    }
    assert grain.experimental.get_element_spec(
        grain.MapDataset.source(ParquetDataSource(path))
    ) == spec
    assert list(grain.experimental.get_element_spec(ParquetIterDataset(path, columns=["f"]))) == ["f"]


def test_elements_fit_the_spec(path):
    assert check_element_spec(lambda: ParquetIterDataset(path), required=True, count=4)
    assert check_element_spec(lambda: ParquetIterDataset([path, path]), required=True, count=8)
    assert check_element_spec(
        lambda: grain.MapDataset.source(ParquetDataSource(path)), required=True, count=4
    )
    assert check_element_spec(
        lambda: grain.MapDataset.source(ParquetDataSource(path, columns=["i", "f"])).batch(2),
        required=True,
    )
