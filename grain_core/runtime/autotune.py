"""``grain_core.experimental.pick_performance_config``: read and worker options within a RAM budget.

Contract: ``pick_performance_config(ds, ram_budget_mb, max_workers=None, max_buffer_size=None)``
reads a few elements of ``ds`` (a ``MapDataset`` or ``IterDataset``, at most ~0.5 s), measures their
size in bytes and their processing time, and returns a :class:`PerformanceConfig` whose
``estimated_ram_mb`` (the model below) is at most ``ram_budget_mb``:

    RAM = workers * (WORKER_OVERHEAD_MB + element_mb * threads_buffer
                     + 2 * max(element_mb * (per_worker_buffer + 1), AHEAD_MB + element_mb))
          + element_mb * threads_buffer                                   (in-process read buffer)

where ``AHEAD_MB`` is :data:`grain_core.runtime.api.AHEAD_BYTES`: how far small elements may run
ahead of ``next()`` per worker beyond ``per_worker_buffer + 1`` elements.

Workers are ``min(os.cpu_count(), max_workers)`` reduced until the estimate fits; none when elements
are so cheap (< ``MIN_WORKER_ELEMENT_SECONDS``) that inter-process transfer would dominate. The read
buffer is capped by ``max_buffer_size`` and shrunk (down to 1) to fit. The choice changes how fast
a pipeline runs, never what it produces for a fixed worker count.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from grain_core import tree
from grain_core.options import MultiprocessingOptions, ReadOptions
from grain_core.runtime.worker import AHEAD_BYTES

__all__ = ["PerformanceConfig", "pick_performance_config"]

WORKER_OVERHEAD_MB = 64.0
MIN_WORKER_ELEMENT_SECONDS = 20e-6
_SAMPLE_SECONDS = 0.5
_SAMPLE_ELEMENTS = 64


@dataclasses.dataclass(frozen=True)
class PerformanceConfig:
    """Options chosen by :func:`pick_performance_config`."""

    multiprocessing_options: MultiprocessingOptions | None = None  # Grain's field order
    read_options: ReadOptions | None = None
    estimated_ram_mb: float = 0.0
    element_bytes: int = 0
    element_seconds: float = 0.0


def _sample(ds: Any, limit: int | None = None) -> tuple[int, float]:
    from grain_core.dataset.base import MapDataset

    count = _SAMPLE_ELEMENTS if limit is None else max(1, int(limit))

    sizes: list[int] = []
    t_total = 0.0
    start = time.perf_counter()
    if isinstance(ds, MapDataset):
        n = len(ds)
        for i in range(min(n, count)):
            t0 = time.perf_counter()
            x = ds[i]
            t_total += time.perf_counter() - t0
            if x is not None:
                sizes.append(tree.nbytes(x))
            if time.perf_counter() - start > _SAMPLE_SECONDS:
                break
    else:
        it = iter(ds)
        try:
            for _ in range(count):
                t0 = time.perf_counter()
                try:
                    x = next(it)
                except StopIteration:
                    break
                t_total += time.perf_counter() - t0
                sizes.append(tree.nbytes(x))
                if time.perf_counter() - start > _SAMPLE_SECONDS:
                    break
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
    if not sizes:
        return 0, 0.0
    return max(sizes), t_total / len(sizes)


def _estimate_mb(workers: int, per_worker: int, buffer: int, element_mb: float) -> float:
    ahead = max(element_mb * (per_worker + 1), AHEAD_BYTES / 2**20 + element_mb)
    in_flight = element_mb * buffer + 2 * ahead
    return workers * (WORKER_OVERHEAD_MB + in_flight) + element_mb * buffer


def pick_performance_config(
    ds: Any,
    ram_budget_mb: int,
    max_workers: int | None = None,
    max_buffer_size: int | None = None,
    samples_to_check: int | None = None,
) -> PerformanceConfig:
    """Returns options that fit ``ram_budget_mb``; see the module docstring for the model.

    ``samples_to_check`` caps how many elements are read to measure them (default: the module's
    sample size)."""
    if ram_budget_mb <= 0:
        raise ValueError(f"ram_budget_mb must be > 0, got {ram_budget_mb}.")
    nbytes, seconds = _sample(ds, samples_to_check)
    element_mb = nbytes / 2**20
    cpus = os.cpu_count() or 1
    workers = cpus if max_workers is None else min(cpus, max(0, int(max_workers)))
    if seconds < MIN_WORKER_ELEMENT_SECONDS:
        workers = 0
    buffer = ReadOptions().prefetch_buffer_size
    if max_buffer_size is not None:
        buffer = max(1, min(buffer, int(max_buffer_size)))
    per_worker = 1
    while True:
        fits = _estimate_mb(workers, per_worker, buffer, element_mb) <= ram_budget_mb
        if fits:
            break
        # Shrink the read buffer first (down to 16), then drop workers, then the buffer to 1.
        if buffer > 16:
            buffer = max(16, buffer // 2)
        elif workers > 0:
            workers -= 1
        elif buffer > 1:
            buffer = max(1, buffer // 2)
        else:
            break
    # Many threads help I/O-bound reads; CPU-bound elements in workers need few.
    threads = ReadOptions().num_threads if workers == 0 else max(1, min(16, buffer))
    threads = min(threads, buffer)
    return PerformanceConfig(
        read_options=ReadOptions(num_threads=threads, prefetch_buffer_size=buffer),
        multiprocessing_options=MultiprocessingOptions(
            num_workers=workers, per_worker_buffer_size=per_worker
        ),
        estimated_ram_mb=_estimate_mb(workers, per_worker, buffer, element_mb),
        element_bytes=nbytes,
        element_seconds=seconds,
    )
