"""Peak memory against the RAM model of docs/performance.md (issue 14).

Each setting runs in its own child process (``python benchmarks/bench_memory.py child NAME``): it
builds a pipeline of 512 KiB elements, reads it with a slow-ish consumer (so every buffer fills),
and samples the memory of its whole process tree (itself, the forkserver and any ``mp_prefetch``
workers, from ``/proc``) every 5 ms. The peak above the tree's memory just before the iterator was
created is compared with the model

    in process:  RAM ≈ element · read_buffer + chunk
    mp_prefetch: RAM ≈ workers · (64 MB + element · read_buffer + chunk
                                  + 2 · max(element · (per_worker_buffer + 1), AHEAD_BYTES + element))

where ``chunk`` is the synchronous chunk (at most ``_CHUNK_BYTES`` = 4 MiB, at least one element)
that reading holds when nothing is read ahead, and ``AHEAD_BYTES`` (1 MiB) how far small elements
may run ahead of ``next()`` per worker beyond ``per_worker_buffer + 1`` elements
(``grain_core.runtime.api``). One setting uses 64 KiB elements, where that allowance is what
bounds the workers.

Memory is measured as the tree's *proportional* set size (``Pss`` of ``/proc/PID/smaps_rollup``):
a page mapped by ``n`` processes counts ``1/n`` in each, so the sum counts each page once. The
resident sizes (``Rss``) of the processes are printed too, but their sum counts a page once per
process mapping it: every shared-memory segment twice (worker and consumer) and the pages workers
share copy-on-write with the forkserver they were forked from once per worker, so it overstates
what a multi-process job uses. ``python benchmarks/bench_memory.py`` prints one row per setting
(``BENCH_MEMORY_ONLY=mp`` runs only the settings whose name contains ``mp``);
``benchmarks/run.py`` prints the same table (``REPORTS``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import threading
import time

ELEMENT = 512 * 1024  # bytes per element
MB = 1e6
WORKER_MB = 64
CHUNK_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    threads: int = 16
    read_buffer: int = 500
    workers: int = 0
    per_worker_buffer: int = 1
    length: int = 600
    shuffle: bool = False
    element: int = ELEMENT  # bytes per element

    def model_mb(self) -> float:
        from grain_core.runtime.api import AHEAD_BYTES

        e = self.element / MB
        sync = not (self.threads and self.read_buffer)
        chunk = max(e, CHUNK_BYTES / MB) if sync else 0.0
        if not self.workers:
            return e * self.read_buffer + chunk
        ahead = max(e * (self.per_worker_buffer + 1), AHEAD_BYTES / MB + e)
        per_worker = WORKER_MB + e * self.read_buffer + chunk + 2 * ahead
        return self.workers * per_worker


SETTINGS = [
    Setting("in-process, threads=0 buffer=0", threads=0, read_buffer=0),
    Setting("in-process, read buffer 128", read_buffer=128),
    Setting("in-process, default ReadOptions (16 threads, buffer 500)"),
    Setting("mp_prefetch(2), per_worker_buffer 1", threads=0, read_buffer=0, workers=2),
    Setting(
        "mp_prefetch(2), per_worker_buffer 4",
        threads=0,
        read_buffer=0,
        workers=2,
        per_worker_buffer=4,
    ),
    Setting(
        "mp_prefetch(2), per_worker_buffer 16",
        threads=0,
        read_buffer=0,
        workers=2,
        per_worker_buffer=16,
    ),
    Setting(
        "mp_prefetch(2), per_worker_buffer 1, 64 KiB elements",
        threads=0,
        read_buffer=0,
        workers=2,
        length=4000,
        element=64 * 1024,
    ),
    Setting(
        "10^8-index shuffled epoch, 16 read threads, buffer 128",
        read_buffer=128,
        length=10**8,
        shuffle=True,
    ),
]


def _tree_memory(pid: int) -> tuple[int, int]:
    """``(Pss, Rss)`` bytes summed over ``pid`` and all its descendants (Linux ``/proc``)."""
    pss = rss = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return pss, rss


def make_element(i: int, nbytes: int = ELEMENT):
    import numpy as np

    return np.full(nbytes, i % 251, dtype=np.uint8)


def _child(name: str) -> None:
    import grain_core as grain

    s = next(x for x in SETTINGS if x.name == name)
    ds = grain.MapDataset.range(s.length)
    if s.shuffle:
        ds = ds.shuffle(seed=0)
    ds = ds.map(functools.partial(make_element, nbytes=s.element)).to_iter_dataset(
        grain.ReadOptions(num_threads=s.threads, prefetch_buffer_size=s.read_buffer)
    )
    if s.workers:
        ds = ds.mp_prefetch(
            grain.MultiprocessingOptions(
                num_workers=s.workers, per_worker_buffer_size=s.per_worker_buffer
            )
        )
    reads = max(300, 3 * (s.read_buffer + s.workers * s.per_worker_buffer))
    pid = os.getpid()
    base = _tree_memory(pid)
    peak = list(base)
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            now = _tree_memory(pid)
            peak[:] = [max(a, b) for a, b in zip(peak, now)]
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    it = iter(ds)
    try:
        for k, x in zip(range(reads), it):
            assert x[0] == x[-1]
            if k % 16 == 0:
                time.sleep(0.01)  # let the buffers fill
    finally:
        now = _tree_memory(pid)
        peak[:] = [max(a, b) for a, b in zip(peak, now)]
        it.close()
        stop.set()
        sampler.join()
    print(
        json.dumps(
            {"name": name, "peak_mb": (peak[0] - base[0]) / MB, "rss_mb": (peak[1] - base[1]) / MB}
        )
    )


def _peak(name: str, env: dict[str, str]) -> dict[str, float] | str:
    proc = subprocess.run(
        [sys.executable, __file__, "child", name],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if proc.returncode:
        return "failed: " + " ".join(proc.stderr.strip().splitlines()[-1:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report() -> None:
    """Prints peak memory against the model for every setting (two child processes each).

    ``peak`` is measured with glibc's default allocator settings; ``peak, fixed mmap threshold``
    with ``MALLOC_MMAP_THRESHOLD_=131072``, which stops glibc from raising its mmap threshold
    after the first large free: with the default, freed 512 KiB elements stay cached in each
    thread's malloc arena, so memory exceeds the live data by up to a few MB per reading thread.
    Both are tree Pss; the last column is the tree's summed Rss (fixed threshold) for reference.
    The model counts live data; ``holds`` compares it with the fixed-threshold peak (10% + 8 MB
    slack)."""
    only = os.environ.get("BENCH_MEMORY_ONLY", "")
    print(
        f"{'memory setting (512 KiB elements unless named)':<58} {'model MB':>9} {'peak MB':>8} "
        f"{'peak, fixed mmap threshold':>27} {'sum of Rss':>11}  holds"
    )
    base = dict(os.environ, JAX_PLATFORMS="cpu")
    for s in SETTINGS:
        if only not in s.name:
            continue
        default = _peak(s.name, base)
        fixed = _peak(s.name, dict(base, MALLOC_MMAP_THRESHOLD_="131072"))
        model = s.model_mb()
        if isinstance(default, str) or isinstance(fixed, str):
            print(f"{s.name:<58} {default if isinstance(default, str) else fixed}")
            continue
        verdict = "yes" if fixed["peak_mb"] <= model * 1.1 + 8 else "NO"
        print(
            f"{s.name:<58} {model:>9.0f} {default['peak_mb']:>8.0f} {fixed['peak_mb']:>27.0f} "
            f"{fixed['rss_mb']:>11.0f}  {verdict}",
            flush=True,
        )


WORKLOADS: list = []
REPORTS = [report]

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        _child(sys.argv[2])
    else:
        report()
