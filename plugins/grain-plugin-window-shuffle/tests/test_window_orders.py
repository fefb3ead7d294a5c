"""The window orders' C accelerator gives numpy's orders (and so Grain's: the recorded orders in
``test_window_shuffle.py`` run through it), refuses bad arguments, and is built wherever it can be."""

from __future__ import annotations

import os
import shutil
import sysconfig

import numpy as np
import pytest
from grain_plugin_window_shuffle import window_orders, window_shuffle

import grain_core as grain
from grain_core.author import shuffle_tables

needs_native = pytest.mark.skipif(
    not window_orders.NATIVE, reason="the C accelerator is not built (test_built_where_it_can_be)"
)


def test_built_where_it_can_be():
    """Where a C compiler and the Python headers exist (CI, a developer's checkout), an install
    builds the accelerator; a silently failed build would leave the numpy orders in use."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if shutil.which(cc) and os.path.exists(headers):
        assert window_orders.NATIVE, (
            f"{cc} and {headers} exist but grain_plugin_window_shuffle._window_orders was not "
            "built: reinstall the plugin and read the build log"
        )
    else:  # no compiler: the numpy orders are used, and asking for C says why it cannot be
        assert not window_orders.NATIVE
        with pytest.raises(RuntimeError, match="without its C accelerator"):
            window_orders.window_tables(10, [0], native=True)


@needs_native
@pytest.mark.parametrize("length", [1, 2, 3, 31, 32, 33, 100, 999, 1000, 4096, 32768, 32769, 65536])
@pytest.mark.parametrize("rounds", [4, 6, 10])
def test_native_orders_are_numpys(length, rounds):
    seeds = [0, 1, 2**32 - 1, 12345, 987654321]
    native = window_orders.window_tables(length, seeds, rounds, native=True)
    numpy = window_orders.window_tables(length, seeds, rounds, native=False)
    np.testing.assert_array_equal(native, numpy)
    np.testing.assert_array_equal(native, shuffle_tables(length - 1, seeds, rounds))
    assert native.dtype == np.int64 and native.shape == (len(seeds), length)
    for row in native:  # each a permutation
        assert np.array_equal(np.sort(row), np.arange(length))


@needs_native
def test_larger_windows_use_numpy():
    length = window_orders.NATIVE_MAX_WINDOW + 1
    got = window_orders.window_tables(length, [3], native=True)
    np.testing.assert_array_equal(got, shuffle_tables(length - 1, [3]))


@needs_native
def test_native_refuses_bad_arguments():
    native = window_orders._native
    assert native is not None
    out = np.empty((1, 10), np.int64)
    with pytest.raises(ValueError, match=r"n must be in \[1, 65536\]"):
        native.window_orders([0], 4, 0, out)
    with pytest.raises(ValueError, match="rounds must be even"):
        native.window_orders([0], 5, 10, out)
    with pytest.raises(ValueError, match="len\\(seeds\\) \\* n = 20 entries"):
        native.window_orders([0, 1], 4, 10, out)
    with pytest.raises(ValueError, match="int64"):
        native.window_orders([0], 4, 10, np.empty(10, np.int32))
    with pytest.raises(ValueError, match="int64"):  # 8 bytes, but not integers
        native.window_orders([0], 4, 10, np.empty(10, np.float64))
    with pytest.raises(ValueError, match="int64"):
        native.window_orders([0], 4, 10, np.empty(10, np.uint64))
    with pytest.raises(ValueError, match="int64"):  # not this machine's byte order
        native.window_orders([0], 4, 10, np.empty(10, np.dtype(np.int64).newbyteorder()))
    with pytest.raises(ValueError, match="not below 2\\*\\*32"):
        native.window_orders([2**32], 4, 10, out)
    with pytest.raises(OverflowError):
        native.window_orders([-1], 4, 10, out)
    with pytest.raises(TypeError, match="sequence of ints"):
        native.window_orders(7, 4, 10, out)
    with pytest.raises((TypeError, BufferError)):  # a read-only buffer
        native.window_orders([0], 4, 10, bytes(80))
    with pytest.raises((TypeError, BufferError, ValueError)):  # not C-contiguous
        native.window_orders([0], 4, 10, np.empty((10, 2), np.int64)[:, 0])


def _shuffled(window: int, n: int) -> list[int]:
    ds = window_shuffle.WindowShuffleIterDataset(
        grain.MapDataset.range(n).to_iter_dataset(), window_size=window, seed=5
    )
    return list(ds)


@pytest.mark.parametrize("window,n", [(1000, 5500), (37, 400), (1, 5)])
def test_iterator_orders_the_same_either_way(monkeypatch, window, n):
    shipped = _shuffled(window, n)
    monkeypatch.setattr(window_orders, "NATIVE", False)
    assert _shuffled(window, n) == shipped
    assert sorted(shipped) == list(range(n))
