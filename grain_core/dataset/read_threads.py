"""How many read threads a threaded ``to_iter_dataset`` uses: all ``num_threads`` while reads wait
(I/O), at most the process's CPU share while reads are CPU work, none (the consumer reads inline)
when that share is one CPU.

``ReadOptions.num_threads`` threads pay off when reads wait (a file, a server): threads overlap
the waits. When reads are CPU work in their thread (decoding, augmenting), more threads than the
process's cores only add contention, thread hand-offs and per-thread memory (each thread's
allocator arena): ``mp_prefetch(num_workers=2)`` on 2 cores would otherwise run 2 x 16 threads.
The process's CPU share is the CPUs it may run on (``os.sched_getaffinity``) divided by the number
of ``mp_prefetch`` workers sharing them (the worker count the iterator was created under, see
:func:`grain_core.dataset.sharing.current_worker`; 1 outside workers), the rule the ``DataLoader``
already applies to its default ``ReadOptions``.

:class:`ReadVerdict` says whether reads are CPU work: a read is CPU work when its thread's CPU time
(``time.thread_time``) is at least ``CPU_SHARE`` of its wall time. Only reads that ran alone are
measured (read by the consumer, or by one pool thread while the consumer waited): reads ahead run
beside other reads, where waiting for the GIL or a core looks like waiting for I/O. The first read
sets the verdict; it then turns to CPU work after ``TO_CPU_READS`` CPU reads in a row, and to
waiting only after ``TO_WAIT_READS`` waiting reads in a row: a read cannot use more CPU than it
did, but a CPU-bound read can look like a wait when other processes take the cores, so a few such
reads on a loaded machine do not resize the pool. Until a read is measured, reads count as
waiting (all threads, as in Grain). The iterator keeps the verdict in its private ``_verdict``
attribute and reads only :attr:`ReadVerdict.cpu_bound` and :meth:`ReadVerdict.record`, so tests
replace it with a fixed one. The thread count changes who reads when, never which elements come
out, in what order, or the iterator's state.
"""

from __future__ import annotations

import os


def available_cpus() -> int:
    """The number of CPUs this process may run on (at least 1)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_threads(num_threads: int, cpu_bound: bool | None, workers: int, cpus: int) -> int:
    """Threads to read with: ``num_threads`` unless ``cpu_bound``; then at most ``cpus //
    workers`` (the process's CPU share), and 0 (read inline) when that share is one CPU."""
    if not cpu_bound or num_threads <= 0:
        return max(num_threads, 0)
    share = max(cpus, 1) // max(workers, 1)
    return min(num_threads, share) if share > 1 else 0


class ReadVerdict:
    """Whether reads are CPU work in their thread (:attr:`cpu_bound`; None before any read)."""

    CPU_SHARE = 0.3
    TO_CPU_READS = 3
    TO_WAIT_READS = 8

    def __init__(self) -> None:
        self.cpu_bound: bool | None = None
        self._against = 0  # reads in a row that disagreed with the verdict

    def record(self, cpu_seconds: float, seconds: float) -> None:
        """One read that ran alone: its thread's CPU seconds and its wall seconds."""
        cpu = cpu_seconds >= self.CPU_SHARE * seconds
        if self.cpu_bound is None or cpu == self.cpu_bound:
            self.cpu_bound, self._against = cpu, 0
            return
        self._against += 1
        if self._against >= (self.TO_CPU_READS if cpu else self.TO_WAIT_READS):
            self.cpu_bound, self._against = cpu, 0


class FixedVerdict(ReadVerdict):
    """A verdict that measurements do not change (for tests and benchmarks)."""

    def __init__(self, cpu_bound: bool | None) -> None:
        super().__init__()
        self.cpu_bound = cpu_bound

    def record(self, cpu_seconds: float, seconds: float) -> None:
        return None
