"""The Ray runtime (grain-plugin-ray) against mp_prefetch and in process on the same pipeline.

Two pipelines, both with a CPU-bound map (``cpu_work.heavy``, a few hundred microseconds each):
small elements (one float) and 256 KiB elements (the float broadcast into a 256 KiB array). Each
runs in process, with ``mp_prefetch`` over ``K`` worker processes, and with ``K`` Ray actors
(``runtime=RayRuntime()``: on one host, the pipe path), and with ``K`` actors sending through actor
calls (``RayRuntime(pipes=False)``). Printed per pipeline and runtime: start-up (iterator creation to the
first ``K`` elements, one per worker), the rate after them, and the ratios of the rates. ``ray.init`` is timed once.

Usage: ``python benchmarks/bench_ray.py [--size tiny|small|full] [--workers K] [--address ADDR]
[--buffer per_worker_buffer_size] [--min-buffer-size M] [--object-store]`` (buffer default 1, Grain's default, for
both runtimes: the actors group elements by bytes, ``RayRuntime.ahead_bytes``;
``--min-buffer-size M`` adds a row: Ray with ``RayRuntime(min_buffer_size=M)``, which lets the
actors group ``M`` elements per call when ``--buffer`` is smaller; ``--object-store`` runs the Ray
rows with ``RayRuntime(shared_memory=False)``: every group through Ray's object store, as on a
remote node, instead of the one-host shared-memory path); from
``benchmarks/run.py`` it runs at full size (``GRAIN_CORE_BENCH_RAY_SIZE=tiny`` for a smoke run).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_work import heavy  # noqa: E402  (importable by name in workers and actors)

#: Elements of the small pipeline and of the 256 KiB pipeline.
SIZES = {"tiny": (200, 40), "small": (2_000, 300), "full": (20_000, 2_000)}
BIG_FLOATS = 256 * 1024 // 8


def heavy_256k(x: int) -> np.ndarray:
    """``heavy(x)`` broadcast into a 256 KiB float64 array."""
    return np.full(BIG_FLOATS, heavy(x))


def pipeline(n: int, big: bool):
    import grain_core as grain

    return (
        grain.MapDataset.range(n)
        .map(heavy_256k if big else heavy)
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
    )


def measure(ds, first: int) -> tuple[float, float, int]:
    """(seconds to the first ``first`` elements incl. iterator creation: every worker started,
    elements/s after them, element count)."""
    t0 = time.perf_counter()
    it = iter(ds)
    try:
        for _ in range(first):
            next(it)
        t1 = time.perf_counter()
        n = first + sum(1 for _ in it)
        t2 = time.perf_counter()
    finally:
        it.close()
    return t1 - t0, (n - first) / max(t2 - t1, 1e-9), n


def run(
    size: str = "full",
    workers: int = 2,
    address: str | None = None,
    buffer: int = 1,
    min_buffer_size: int | None = None,
    object_store: bool = False,
) -> dict:
    """Runs the comparison; prints and returns ``{pipeline: {runtime: (start s, rate)}}``."""
    try:
        import ray
        from grain_plugin_ray import RayRuntime
    except ImportError:
        print("bench_ray: grain-plugin-ray / ray not installed, skipped.")
        return {}
    import grain_core as grain

    small_n, big_n = SIZES[size]
    t0 = time.perf_counter()
    if not ray.is_initialized():
        if address is None:
            # Ray starts its workers at nice 15; mp_prefetch's worker processes run at the
            # consumer's priority: the actors get the same (docs/ray.md, "CPU priority").
            ray.init(
                address="local",
                num_cpus=workers,
                include_dashboard=False,
                log_to_driver=False,
                _system_config={"worker_niceness": 0},
            )
        else:
            ray.init(address=address, log_to_driver=False)
    init_s = time.perf_counter() - t0
    print(
        f"Ray runtime benchmark ({size}): {workers} workers, per_worker_buffer_size={buffer}; "
        f"ray.init {init_s:.2f} s" + ("; actors at nice 0" if address is None else "")
        + ("; groups through the object store" if object_store else "")
    )
    # A Ray call costs ~1 ms where a pipe costs ~20 us: the actors group elements up to
    # RayRuntime.ahead_bytes (32 MiB) per call whatever the buffer.
    options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer)
    runtime = RayRuntime(num_cpus=1, shared_memory=not object_store)
    out: dict = {}
    try:
        for name, n, big in (("small elements", small_n, False), ("256 KiB elements", big_n, True)):
            rows = {
                "in process": measure(pipeline(n, big), workers),
                f"mp_prefetch({workers})": measure(pipeline(n, big).mp_prefetch(options), workers),
                f"Ray({workers})": measure(
                    pipeline(n, big).mp_prefetch(options, runtime=runtime), workers
                ),
            }
            if not object_store:  # the one-host path before pipes: a fetch call per group
                calls = RayRuntime(num_cpus=1, pipes=False)
                rows[f"Ray({workers}) actor calls"] = measure(
                    pipeline(n, big).mp_prefetch(options, runtime=calls), workers
                )
            if min_buffer_size is not None:
                grouped = RayRuntime(
                    num_cpus=1, min_buffer_size=min_buffer_size, shared_memory=not object_store
                )
                rows[f"Ray({workers}) min_buffer_size={min_buffer_size}"] = measure(
                    pipeline(n, big).mp_prefetch(options, runtime=grouped), workers
                )
            out[name] = {k: (s, r) for k, (s, r, _) in rows.items()}
            print(f"  {name}, {n} elements, CPU-bound map:")
            for k, (s, r, count) in rows.items():
                assert count == n, (k, count, n)
                print(f"    {k:36s} start-up {s:7.2f} s   {r:10.1f} elements/s")
            ray_rate = out[name][f"Ray({workers})"][1]
            mp_rate = out[name][f"mp_prefetch({workers})"][1]
            calls = out[name].get(f"Ray({workers}) actor calls")
            print(
                f"    ratios: Ray / mp_prefetch {ray_rate / mp_rate:.2f}"
                f"   Ray / in process {ray_rate / out[name]['in process'][1]:.2f}"
                + ("" if calls is None else f"   Ray actor calls / mp_prefetch {calls[1] / mp_rate:.2f}")
            )
    finally:
        if address is None:
            ray.shutdown()
    return out


def ray_runtime_report() -> None:
    run(os.environ.get("GRAIN_CORE_BENCH_RAY_SIZE", "full"))


WORKLOADS: list = []  # rates against google's grain do not apply: grain has no Ray runtime
REPORTS = [ray_runtime_report]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--address", default=None, help="an existing Ray cluster (default: local)")
    parser.add_argument("--buffer", type=int, default=1, help="per_worker_buffer_size")
    parser.add_argument(
        "--min-buffer-size", type=int, default=None, help="adds a row: RayRuntime(min_buffer_size=)"
    )
    parser.add_argument(
        "--object-store",
        action="store_true",
        help="Ray rows with RayRuntime(shared_memory=False): groups through the object store",
    )
    args = parser.parse_args()
    run(args.size, args.workers, args.address, args.buffer, args.min_buffer_size, args.object_store)
