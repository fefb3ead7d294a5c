"""Issue 8 workloads: the cost of execution statistics.

``stats off`` is ``iter(ds)`` on a pipeline after ``iter_with_stats`` was used on the same dataset
object: statistics are installed on instrumented copies only, so the plain path must run at the
baseline's rate (any difference is noise). ``stats on`` shows what instrumentation costs. grain's
column runs its plain pipeline in every row, for scale.

The ``mp_prefetch`` rows do the same with 2 worker processes: with statistics on, each worker
instruments its own pipeline and sends its counters with every message of elements; off, the
workers run the plain pipeline and send nothing more.
"""

from __future__ import annotations

from harness import Workload

try:  # google's grain reads absl flags in mp_prefetch; the harness does not parse them.
    from absl import flags as _flags

    if not _flags.FLAGS.is_parsed():
        _flags.FLAGS.mark_as_parsed()
except ImportError:  # pragma: no cover
    pass


def _plus_one(x):
    return x + 1


def _pipeline(lib):
    return (
        lib.MapDataset.range(200_000)
        .shuffle(seed=0)
        .map(_plus_one)
        .batch(32)
        .to_iter_dataset(lib.ReadOptions(num_threads=0))
        .map(_plus_one)
    )


def _stats_off(lib):
    ds = _pipeline(lib)
    if lib.__name__ == "grain_core":
        from grain_core.stats import iter_with_stats

        next(iter_with_stats(ds))  # instrumenting a copy must leave ds's own path untouched
    return ds


def _mp_pipeline(lib):
    return (
        lib.MapDataset.range(1_000_000)
        .shuffle(seed=0)
        .map(_plus_one)
        .batch(32)
        .to_iter_dataset()
        .mp_prefetch(lib.MultiprocessingOptions(num_workers=2))
    )


class _WithStats:
    def __init__(self, ds):
        self._ds = ds

    def __iter__(self):
        from grain_core.stats import iter_with_stats

        return iter_with_stats(self._ds)


def _warm_up():
    """Plugin discovery and first-use imports happen here, not in the baseline's timing."""
    import grain_core

    for _ in zip(range(100), _pipeline(grain_core)):
        pass


WORKLOADS = [
    Workload("stats baseline: range(200k).shuffle.map.batch(32).to_iter.map", _pipeline, count=len,
             setup=_warm_up),
    Workload("stats off (after iter_with_stats on the same ds)", _stats_off, count=len,
             build_theirs=_pipeline),
    Workload("stats on: iter_with_stats", lambda lib: _WithStats(_pipeline(lib)), count=len,
             build_theirs=_pipeline),
    Workload("stats off: range(1M).shuffle.map.batch(32).mp_prefetch(2 workers)", _mp_pipeline,
             count=len),
    Workload("stats on: the same under iter_with_stats (workers report)",
             lambda lib: _WithStats(_mp_pipeline(lib)), count=len, build_theirs=_mp_pipeline),
]
