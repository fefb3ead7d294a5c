"""Reading ahead is not measured where too little is left for the measurement to pay off.

Measuring reading ahead reads about three buffers' worth in the pool; for CPU-bound reads holding
the GIL that runs much slower than reading inline, so near the end of a short run (fewer than
``prefetch.EXPLORE_LEFT`` buffers' worth left to read) the iterator reports
``ReadStep.ahead_can_pay`` false, unless reads wait (I/O, which reading ahead always hides), and
the policy then neither explores nor probes reading ahead. The policy is driven with made-up steps
(it has no clock); the iterator's reports are checked with reads that wait (a sleep uses no CPU)
and far from the end. No check depends on how fast anything runs.
"""

from __future__ import annotations

import time

from test_read_policy import SCRIPTS, _scripted

import grain_core as grain
from grain_core.dataset import prefetch
from grain_core.dataset.read_policy import ReadModePolicy, ReadStep

P = ReadModePolicy


def _cheap_reads_windows(p: ReadModePolicy, can_pay: bool) -> None:
    """Windows without reading ahead whose reads take nearly all the time (reading ahead could
    win by far, were the reads to release the GIL)."""
    for _ in range(40 * P.MIN_STEPS):
        p.record(ReadStep(False, 1000, 0.01, True, 0.0099, ahead_can_pay=can_pay))


def test_reading_ahead_is_explored_when_it_can_pay():
    p = ReadModePolicy()
    _cheap_reads_windows(p, True)
    assert p.read_ahead or p.phase != "first"  # explored (a window reading ahead was asked for)


def test_reading_ahead_is_neither_explored_nor_probed_when_it_cannot_pay():
    p = ReadModePolicy()
    _cheap_reads_windows(p, False)
    assert not p.read_ahead and p.phase == "keep"
    assert p.rate(True) == 0.0  # never measured


def test_more_left_again_explores():
    """``ahead_can_pay`` follows the latest step: a longer run (a restore to an earlier
    position, say) explores again."""
    p = ReadModePolicy()
    _cheap_reads_windows(p, False)
    _cheap_reads_windows(p, True)
    assert p.read_ahead


class _WaitingSource:
    """Reads that wait (as I/O does): a sleep per call, which uses no CPU."""

    def __init__(self, n: int):
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        return i

    def __getitems__(self, indices):
        time.sleep(0.002)
        return [int(i) for i in indices]


def _steps(src, options, script="inline"):
    ds = src if isinstance(src, grain.MapDataset) else grain.MapDataset.source(src)
    it = iter(ds.to_iter_dataset(options))
    policy = _scripted(it, SCRIPTS[script])
    assert list(it) == list(range(len(ds)))
    it.close()
    return [s for s in policy.steps if not s.read_ahead and s.elements]


def test_waiting_reads_near_the_end_can_pay():
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=50)
    n = 50 * prefetch.EXPLORE_LEFT  # near the end from the start
    for script in ("inline", "on demand"):
        steps = _steps(_WaitingSource(n), options, script)
        assert steps and all(s.ahead_can_pay for s in steps)


def test_far_from_the_end_reading_ahead_can_pay():
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
    n = 4 * prefetch.EXPLORE_LEFT * 50
    steps = _steps(grain.MapDataset.range(n), options)
    assert steps and steps[0].ahead_can_pay


def test_near_end_is_counted_in_buffers_left_to_read():
    options = grain.ReadOptions(num_threads=2, prefetch_buffer_size=10)
    n = 10 * prefetch.EXPLORE_LEFT
    it = iter(grain.MapDataset.range(n).to_iter_dataset(options))
    assert not it._near_end()  # EXPLORE_LEFT buffers' worth left: not near the end
    it._read_to = 1
    assert it._near_end()  # fewer left
    it.close()
    sync = iter(grain.MapDataset.range(5).to_iter_dataset(grain.ReadOptions(num_threads=0)))
    assert not sync._near_end()  # no threads: nothing to explore
