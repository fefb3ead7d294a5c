"""A second Ctrl-C landing while interleave (or a stage reading it) handles the first loses and
repeats nothing: real ``SIGALRM`` interrupts, up to three per call, in grain_core, in the plugin
and in this file's user function, with and without reader and opening threads, read by ``next()``
and by ``next_chunk()`` (a chunked ``map`` reading interleave's chunks too). Each run compares the
elements with an uninterrupted run and restores states taken right after interrupts; only the
output is asserted, never timing (so each case runs a few times: where the second interrupt lands
is random)."""

from __future__ import annotations

import signal
import sys

import grain_plugin_interleave
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


def _make(buffer, threads, mapped):
    def make():
        parts = [
            grain.MapDataset.range(i * 100, i * 100 + 60 + i).map(_slow).to_iter_dataset(_RO0)
            for i in range(6)
        ]
        ds = grain.experimental.InterleaveIterDataset(
            parts, cycle_length=3, iter_buffer_size=buffer, num_make_iter_threads=threads
        )
        return ds.map(_slow) if mapped else ds

    return make


_CASES = [
    (buffer, threads, mapped, chunks)
    for buffer, threads in ((0, 0), (2, 0), (2, 1))
    for mapped in (False, True)
    for chunks in (False, True)
]


@pytest.mark.parametrize(
    "buffer,threads,mapped,chunks",
    _CASES,
    ids=[f"buf{b}-open{t}{'-map' if m else ''}{'-chunks' if c else ''}" for b, t, m, c in _CASES],
)
def test_second_interrupt_loses_nothing(buffer, threads, mapped, chunks):
    for _ in range(15 if buffer == 0 and chunks else 1):
        check_interrupts(
            _make(buffer, threads, mapped),
            packages=(grain, grain_plugin_interleave, _HERE),
            per_call=3,
            read_chunks=chunks,
        )
