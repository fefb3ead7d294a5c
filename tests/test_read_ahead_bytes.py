"""to_iter_dataset with threads reads ahead at most about READ_AHEAD_BYTES of elements (never
fewer elements than threads): prefetch_buffer_size counts elements, and 500 large batches would
hold gigabytes."""

from __future__ import annotations

import numpy as np

import grain_core as grain
from grain_core.dataset import prefetch

MIB = 1 << 20


def _iterator(element_bytes: int, threads: int, buffer: int):
    ds = (
        grain.MapDataset.range(400)
        .map(lambda i: np.full(element_bytes, i % 251, np.uint8))
        .to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=buffer))
    )
    return iter(ds)


def _in_flight(it) -> int:
    rest = len(it._current) - it._current_pos
    return rest + sum(stop - start for start, stop, _, _ in it._buffer)


def test_large_elements_are_read_ahead_up_to_the_byte_bound():
    it = _iterator(4 * MIB, threads=2, buffer=100)
    try:
        first = next(it)
        assert first[0] == 0
        expected = prefetch.READ_AHEAD_BYTES // (4 * MIB)
        assert it._sizes.budget() == expected < 100
        it.start_prefetch()  # read ahead at once: fill up to the bound
        assert _in_flight(it) <= expected
        got, most = [], 0
        for x in it:
            got.append(int(x[0]))
            most = max(most, _in_flight(it))
        # A chunk may be queued while the buffer is empty (at most the bound itself).
        assert most <= 2 * expected
        assert got == [i % 251 for i in range(1, 400)]  # order unchanged
    finally:
        it.close()


def test_the_bound_never_leaves_a_thread_without_an_element():
    it = _iterator(prefetch.READ_AHEAD_BYTES, threads=3, buffer=100)
    try:
        next(it)
        assert it._sizes.budget() == 3
    finally:
        it.close()


def test_small_elements_keep_the_element_count_buffer():
    it = _iterator(64, threads=2, buffer=100)
    try:
        next(it)
        assert it._sizes.budget() == 100
    finally:
        it.close()
