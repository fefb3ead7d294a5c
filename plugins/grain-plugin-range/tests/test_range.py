"""grain-plugin-range: RangeDataSource and MapDataset.range, discovered through the entry point."""

import subprocess
import sys

import pytest
from grain_plugin_range import RangeDataSource

import grain_core as grain
from grain_core import testing
from grain_core.plugins import list_plugins


@pytest.mark.parametrize(
    "args", [(0, 10, 1), (1, 10, 2), (10, 0, -3), (-5, 5, 1), (5, 5, 1), (5, 0, 1), (0, 10**12, 10**9)]
)
def test_source_matches_builtin_range(args):
    src = RangeDataSource(*args)
    assert len(src) == len(range(*args))
    assert list(src) == list(range(*args))
    assert [src[i] for i in range(len(src))] == list(range(*args))
    assert src.__getitems__(list(range(len(src)))[::-1]) == list(range(*args))[::-1]


def test_seed_003_example():
    range_data_source = grain.sources.RangeDataSource(start=1, stop=10, step=2)
    assert list(range_data_source) == [1, 3, 5, 7, 9]


@pytest.mark.parametrize("args", [(5,), (2, 8), (2, 8, 2), (8, 2, -2), (0,), (3, 3)])
def test_map_dataset_range(args):
    assert list(grain.MapDataset.range(*args)) == list(range(*args))


def test_conformance():
    testing.check_source(RangeDataSource(3, 500, 7), mp_workers=2)


def test_checkpoint_through_pipeline():
    testing.assert_equal_output_after_checkpoint(grain.MapDataset.range(0, 100, 3).shuffle(seed=1).batch(4))


def test_bad_input():
    with pytest.raises(ValueError, match="step must not be zero"):
        grain.MapDataset.range(0, 10, 0)
    with pytest.raises(TypeError, match="stop must be an int"):
        grain.MapDataset.range(0, 1.5)
    with pytest.raises(IndexError, match="out of range"):
        RangeDataSource(0, 5).__getitems__([5])
    with pytest.raises(IndexError):
        RangeDataSource(0, 5)[5]


def test_listed_with_version():
    info = {p.name: p for p in list_plugins()}
    assert info["range"].distribution == "grain-plugin-range"
    assert info["range"].version == "0.1.0"
    out = subprocess.run(
        [sys.executable, "-m", "grain_core", "plugins"], capture_output=True, text=True, check=True
    ).stdout
    assert "range: grain-plugin-range 0.1.0 [loaded]" in out


def test_repr_identifies_data():
    assert repr(RangeDataSource(1, 10, 2)) == "RangeDataSource(start=1, stop=10, step=2)"
    assert RangeDataSource(1, 10, 2) == RangeDataSource(1, 10, 2)
