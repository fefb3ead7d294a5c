"""Ctrl-C inside ``next()`` of the many-to-one stages — rebatch, zip, repeat, mix — loses and
repeats nothing, over each runtime their parents can run on: in this process (parents that can
move back), thread prefetch and ``mp_prefetch`` processes (parents that cannot); with one
interrupt per call, and with a second one landing while the first is being handled.

Real ``SIGALRM`` interrupts (:func:`grain_core.testing.check_interrupts`) land wherever the main
thread runs grain_core code or this file's functions (the user's code); every test compares the
elements with an uninterrupted run and restores states taken right after interrupts. Nothing
asserts a duration or how many interrupts landed where.
"""

from __future__ import annotations

import signal
import sys

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
    a = np.arange(200, dtype=np.float64) + x
    for _ in range(3):
        a = np.sqrt(a * a + 1.0)
    return int(x)


def _parent(runtime: str, n: int, start: int = 0) -> grain.IterDataset:
    ds = grain.MapDataset.range(start, start + n).map(_slow).to_iter_dataset(_RO0)
    if runtime == "thread":
        return grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=4)
    if runtime == "processes":
        return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=4))
    return ds


def _stages(runtime: str) -> dict:
    small = runtime == "processes"  # worker start-ups are slow on a loaded machine
    n = 120 if small else 300
    return {
        "rebatch": lambda: grain.experimental.RebatchIterDataset(_parent(runtime, n).batch(5), 7),
        "rebatch_drop": lambda: grain.experimental.RebatchIterDataset(
            _parent(runtime, n).batch(4), 9, drop_remainder=True
        ),
        "zip": lambda: grain.experimental.ZipIterDataset(
            [_parent(runtime, n), _parent("in_process", n, 1000).map(_slow)]
        ),
        "zip_first_in_process": lambda: grain.experimental.ZipIterDataset(
            [_parent("in_process", n, 1000).map(_slow), _parent(runtime, n)]
        ),
        "repeat": lambda: grain.experimental.RepeatIterDataset(
            _parent(runtime, 40 if small else 100), num_epochs=3
        ),
        "mix": lambda: grain.IterDataset.mix(
            [_parent(runtime, n), _parent("in_process", n, 1000).map(_slow)], [2, 1]
        ),
        "mix_both": lambda: grain.IterDataset.mix(
            [_parent(runtime, n).map(_slow), _parent(runtime, n, 1000)], [1, 3]
        ),
    }


_CASES = [
    (stage, runtime, per_call, chunks)
    for runtime in ("in_process", "thread", "processes")
    for stage in sorted(_stages(runtime))
    for per_call in ((2,) if runtime == "processes" else (1, 2))
    for chunks in ((False, True) if runtime == "in_process" else (False,))
]


@pytest.mark.parametrize(
    "stage,runtime,per_call,chunks",
    _CASES,
    ids=[f"{s}-{r}-x{p}{'-chunks' if c else ''}" for s, r, p, c in _CASES],
)
def test_stage_survives_real_interrupts(stage, runtime, per_call, chunks):
    check_interrupts(
        _stages(runtime)[stage], packages=(grain, _HERE), per_call=per_call, read_chunks=chunks
    )


# --- a second interrupt while the first is being handled, in the one-to-one stages -------------


def _pred(x):
    return _slow(x) % 3 != 1


def _random(x, rng):
    return _slow(x) * 1000 + int(rng.integers(0, 1000))


def _with_index(i, x):
    return (i, _slow(x))


def _batch_fn(xs):
    return [_slow(x) for x in xs]


class _Split(grain.transforms.FlatMap):
    max_fan_out = 3

    def flat_map(self, x):
        return [_slow(x)] * (x % 3)


def _one_to_one(runtime: str) -> dict:
    src = lambda: _parent(runtime, 150 if runtime == "processes" else 400)  # noqa: E731
    return {
        "map": lambda: src().map(_slow),
        "filter": lambda: src().filter(_pred),
        "random_map": lambda: src().seed(3).random_map(_random),
        "map_with_index": lambda: src().map_with_index(_with_index),
        "batch": lambda: src().map(_slow).batch(4),
        "batch_fn": lambda: src().batch(5, batch_fn=_batch_fn),
        "filter_batch": lambda: src().filter(_pred).batch(3),
        "flat_map": lambda: grain.experimental.FlatMapIterDataset(src(), _Split()),
    }


_SECOND = [
    (stage, runtime, chunks)
    for runtime in ("in_process", "thread", "processes")
    for stage in sorted(_one_to_one(runtime))
    for chunks in ((False, True) if runtime == "in_process" else (False,))
]


@pytest.mark.parametrize(
    "stage,runtime,chunks",
    _SECOND,
    ids=[f"{s}-{r}{'-chunks' if c else ''}" for s, r, c in _SECOND],
)
def test_second_interrupt_during_the_first_loses_nothing(stage, runtime, chunks):
    check_interrupts(
        _one_to_one(runtime)[stage], packages=(grain, _HERE), per_call=3, read_chunks=chunks
    )
