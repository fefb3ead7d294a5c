"""Ctrl-C inside ``next()`` of the packers (first fit, best fit, concat-then-split) loses and
repeats nothing: real ``SIGALRM`` interrupts land in grain_core, in the plugin's own code and in
this file's user function, one per call or a second one while the first is being handled, over
parents in this process, in a prefetch thread and in ``mp_prefetch`` workers. Each test compares
the rows with an uninterrupted run and restores states taken right after interrupts (only the
output is asserted, never timing)."""

from __future__ import annotations

import signal
import sys

import grain_plugin_packing
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


def _doc(i):
    n = 1 + (i * 7919) % 11
    return {"inputs": np.arange(n) + 100 * i, "id": np.array([i])}


def _docs(runtime, n):
    ds = grain.MapDataset.range(n).map(_doc).to_iter_dataset(_RO0)
    if runtime == "thread":
        return grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=4)
    if runtime == "processes":
        return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=4))
    return ds


def _make(stage, runtime):
    n = 80 if runtime == "processes" else 200
    if stage == "concat_then_split":
        return lambda: grain.experimental.ConcatThenSplitIterDataset(
            _docs(runtime, n), length_struct={"inputs": 10, "id": 4}, meta_features=("id",)
        )
    return lambda: getattr(grain.experimental, stage)(
        _docs(runtime, n),
        length_struct={"inputs": 16, "id": 4},
        num_packing_bins=3,
        meta_features=("id",),
        seed=5,
    )


_CASES = [
    (stage, runtime, per_call)
    for stage in ("FirstFitPackIterDataset", "BestFitPackIterDataset", "concat_then_split")
    for runtime in ("in_process", "thread", "processes")
    for per_call in ((2,) if runtime == "processes" else (1, 2))
]


@pytest.mark.parametrize(
    "stage,runtime,per_call", _CASES, ids=[f"{s}-{r}-x{p}" for s, r, p in _CASES]
)
def test_packer_survives_real_interrupts(stage, runtime, per_call):
    check_interrupts(
        _make(stage, runtime), packages=(grain, grain_plugin_packing, _HERE), per_call=per_call
    )
