"""``grain_core.index_arrays.unique_ints``: ``np.unique`` of index arrays without importing
``numpy.ma``, and the kernel's stages that group a chunk's indices by epoch use it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from grain_core.author import unique_ints


@pytest.mark.parametrize(
    "values",
    [
        np.zeros(0, dtype=np.int64),
        np.array([7], dtype=np.int64),
        np.array([5, 1, 5, 2, 1, 9], dtype=np.int64),
        np.random.default_rng(0).integers(-40, 50, 1000),
        np.arange(10, dtype=np.int32)[::-1],
    ],
)
def test_same_as_np_unique(values):
    got = unique_ints(values)
    want = np.unique(values)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_input_left_unchanged():
    values = np.array([3, 1, 2, 1], dtype=np.int64)
    unique_ints(values)
    np.testing.assert_array_equal(values, [3, 1, 2, 1])


_CROSS_EPOCH_READS = """
import sys
import grain_core as grain
from grain_core.samplers import IndexSampler
from grain_core.sharding import NoSharding
assert "numpy.ma" not in sys.modules, "imported before the reads"
ds = grain.MapDataset.range(10).shuffle(seed=1).repeat(3)
got = ds.__getitems__(list(range(5, 25)))
assert got == [ds[i] for i in range(5, 25)], got
assert sorted(got[5:15]) == list(range(10)), got
mixed = grain.MapDataset.mix([grain.MapDataset.range(4), grain.MapDataset.range(4)])
assert len(mixed.__getitems__(list(range(8)))) == 8
sampler = IndexSampler(10, NoSharding(), shuffle=True, num_epochs=3, seed=2)
assert len([sampler[i] for i in range(5, 25)]) == 20
print("numpy.ma" in sys.modules)
"""


def test_reads_across_epochs_do_not_import_numpy_ma():
    """A worker process's first chunk across two epochs stays cheap: no stage reaches
    ``np.unique`` (which imports ``numpy.ma``, tens of milliseconds per worker start)."""
    out = subprocess.run(
        [sys.executable, "-c", _CROSS_EPOCH_READS],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "a stage imported numpy.ma (np.unique?)"
