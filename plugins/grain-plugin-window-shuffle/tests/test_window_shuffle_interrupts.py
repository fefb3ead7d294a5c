"""Ctrl-C inside ``next()`` / ``next_chunk()`` of ``WindowShuffleIterDataset`` loses and repeats
nothing: real ``SIGALRM`` interrupts land in grain_core, in the plugin's own code and in this
file's user function, one per call or a second one while the first is being handled, over parents
in this process, in a prefetch thread and in ``mp_prefetch`` workers. Each test compares the
elements with an uninterrupted run and restores states taken right after interrupts (only the
output is asserted, never timing)."""

from __future__ import annotations

import signal
import sys

import grain_plugin_window_shuffle
import numpy as np
import pytest

import grain_core as grain
from grain_core.testing import check_interrupts

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers"),
]

_HERE = sys.modules[__name__]
_RO0 = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _slow(x):
    a = np.arange(100, dtype=np.float64) + x
    for _ in range(3):
        a = np.sqrt(a * a + 1.0)
    return int(x)


def _make(runtime, window):
    n = 120 if runtime == "processes" else 400

    def make():
        ds = grain.MapDataset.range(n).map(_slow).to_iter_dataset(_RO0)
        if runtime == "thread":
            ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=4)
        elif runtime == "processes":
            ds = ds.mp_prefetch(
                grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=4)
            )
        return grain.experimental.WindowShuffleIterDataset(ds, window_size=window, seed=7)

    return make


_CASES = [
    (runtime, window, per_call, chunks)
    for runtime in ("in_process", "thread", "processes")
    for window in (1, 7, 64)
    for per_call in ((2,) if runtime == "processes" else (1, 2))
    for chunks in ((False,) if runtime == "processes" else (False, True))
]


@pytest.mark.parametrize(
    "runtime,window,per_call,chunks",
    _CASES,
    ids=[f"{r}-w{w}-x{p}{'-chunks' if c else ''}" for r, w, p, c in _CASES],
)
def test_window_shuffle_survives_real_interrupts(runtime, window, per_call, chunks):
    check_interrupts(
        _make(runtime, window),
        packages=(grain, grain_plugin_window_shuffle, _HERE),
        per_call=per_call,
        read_chunks=chunks,
    )
