"""``to_iter_dataset`` with threads over a source with a high latency per call (a remote reader that
makes one call's reads concurrent, so a call costs about the same whatever its size): the source
gets indices in bulk, not one per call, whether the pool reads ahead or reads on demand.

Before, chunks read with threads shrank to one element once a call took over 8 ms (on demand) or
once the pool's chunks took long (ahead), and topping the buffer up by the few elements just
consumed kept every later chunk that small: one round trip per element."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from test_read_policy import SCRIPTS, _scripted

import grain_core as grain

pytestmark = pytest.mark.timeout(300)

LATENCY_S = 0.02  # per call, whatever its size (the call's requests are in flight together)


class LatencySource:
    """``__getitems__`` waits ``LATENCY_S`` once per call (like a round trip) and records sizes."""

    def __init__(self, n: int):
        self._n = n
        self.sizes: list[int] = []
        self._lock = threading.Lock()

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        return self.__getitems__([i])[0]

    def __getitems__(self, indices):
        idx = [int(i) for i in indices]
        time.sleep(LATENCY_S)
        with self._lock:
            self.sizes.append(len(idx))
        return idx


@pytest.mark.parametrize("script", ["ahead", "on demand", None], ids=str)
def test_a_high_latency_source_gets_indices_in_bulk_with_threads(script):
    n = 6000
    src = LatencySource(n)
    it = iter(grain.MapDataset.source(src).to_iter_dataset(grain.ReadOptions()))
    if script is not None:
        _scripted(it, SCRIPTS[script])
    assert list(it) == list(range(n))
    it.close()
    later = src.sizes[len(src.sizes) // 4 :]  # past the ramp
    # One element per call would be 6,000 calls (before: calls of 1 to 4 elements). Calls grow to
    # one thread's share of the buffer (500 // 16 = 31) reading ahead, up to the buffer on demand.
    assert len(src.sizes) < n // 8, src.sizes
    assert float(np.median(later)) >= 16, src.sizes
    assert max(src.sizes) <= grain.ReadOptions().prefetch_buffer_size
