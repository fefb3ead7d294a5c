"""Issue 6: checkpoint save and restore latency, grain_core beside google's grain.

The harness measures throughput, so this module measures latency itself: ``checkpoint_latencies()``
times, for each library, ``CheckpointManager.save(..., force=True)`` + ``wait_until_finished()``
and ``restore(...)`` + the first ``next()`` after it, on the same pipeline read through
``mp_prefetch`` with 2 worker processes, and prints the medians. ``WORKLOADS`` holds the
throughput of that pipeline for the harness; run this file directly for the latency table::

    python benchmarks/bench_checkpoint.py
"""

from __future__ import annotations

import statistics
import tempfile
import time

from harness import Workload


def _plus_one(x):
    return x + 1


def _pipeline(lib):
    return (
        lib.MapDataset.range(100_000)
        .seed(0)
        .shuffle()
        .map(_plus_one)
        .batch(32)
        .to_iter_dataset()
        .mp_prefetch(lib.MultiprocessingOptions(num_workers=2))
    )


def _latencies(lib, repeats: int) -> tuple[float, float]:
    import orbax.checkpoint as ocp

    it = iter(_pipeline(lib))
    saves, restores = [], []
    try:
        with tempfile.TemporaryDirectory() as d:
            mngr = ocp.CheckpointManager(d, options=ocp.CheckpointManagerOptions(max_to_keep=2))
            for step in range(repeats):
                for _ in range(20):
                    next(it)
                t0 = time.perf_counter()
                mngr.save(step, args=lib.checkpoint.CheckpointSave(it), force=True)
                mngr.wait_until_finished()
                saves.append(time.perf_counter() - t0)
                next(it)
                t0 = time.perf_counter()
                mngr.restore(step, args=lib.checkpoint.CheckpointRestore(it))
                next(it)
                restores.append(time.perf_counter() - t0)
            mngr.close()
    finally:
        it.close()
    return statistics.median(saves), statistics.median(restores)


def checkpoint_latencies(repeats: int = 5) -> dict[str, tuple[float, float]]:
    """Prints and returns ``{library: (median save s, median restore s)}``."""
    import grain
    from absl import flags

    import grain_core

    if not flags.FLAGS.is_parsed():  # grain's mp_prefetch reads absl flags
        flags.FLAGS.mark_as_parsed()

    out = {}
    for name, lib in (("grain_core", grain_core), ("grain", grain)):
        out[name] = _latencies(lib, repeats)
    print("checkpoint latency, range(100k).shuffle.map.batch(32).mp_prefetch(2 workers), medians:")
    for name, (s, r) in out.items():
        print(f"  {name:10s} save+wait {s * 1e3:8.1f} ms   restore+first next {r * 1e3:8.1f} ms")
    return out


WORKLOADS = [
    Workload("range(100k).shuffle.map.batch(32).mp_prefetch(2 workers)", _pipeline, count=len),
]


if __name__ == "__main__":
    checkpoint_latencies()


REPORTS = [checkpoint_latencies]
