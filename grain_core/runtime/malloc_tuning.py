"""glibc's malloc in the processes an ``mp_prefetch`` pipeline runs in: the consumer (with any
runtime) and each worker (process or actor).

Both sides run streams of same-sized allocations and frees. A worker's map makes an element's
arrays, which are copied into shared memory and freed once sent; the consumer copies the buffers of
messages it does not lend out of shared memory into fresh arrays (see
:mod:`grain_core.runtime.shm`), which the training loop frees moments later. glibc's default
("dynamic") thresholds let such a stream page-fault afresh for every element: after a large free
it serves later allocations of that size from the heap, but trims the top of the heap back to the
system whenever more than twice that size is free there, so the pages of the elements just freed
go back to the kernel and the next elements fault them in again (zeroed). 256 KiB elements
through ``mp_prefetch(2)`` on 2 cores: the consumer spent about half its CPU time on those faults
(the pipeline ran 20-25% slower than with the thresholds fixed), and with the consumer tuned, the
workers still spent about 15% more CPU per element than with theirs fixed too.

:func:`tune_malloc` (called once per process: by the first ``RoundRobinConsumer`` in the consumer,
by ``WorkerLoop`` in each worker, and by any source whose reads allocate and free large buffers at
the rate of records, through ``grain_core.author.tune_malloc``) sets the thresholds glibc's
dynamic rule would itself end at for the largest allocations it moves to the heap:
``M_MMAP_THRESHOLD`` 32 MiB (allocations of that size or more stay separate mappings, freed at
once) and ``M_TRIM_THRESHOLD`` 64 MiB (the freed top of the heap is returned beyond that). So the process keeps up to 64 MiB of freed heap for reuse, where the
default would keep about twice its largest recent allocation. It does nothing where the C library
is not glibc, when any ``MALLOC_*_`` threshold variable is set (the user's own choice stands), or
when ``GRAIN_CORE_MALLOC_TUNING=0``.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

__all__ = ["MMAP_THRESHOLD", "OPT_OUT_ENV", "TRIM_THRESHOLD", "tune_malloc"]

#: ``M_MMAP_THRESHOLD`` set: glibc's maximum for its dynamic threshold (on 64-bit systems).
MMAP_THRESHOLD = 32 << 20
#: ``M_TRIM_THRESHOLD`` set: twice the mmap threshold, as glibc's dynamic rule keeps it.
TRIM_THRESHOLD = 64 << 20
#: ``GRAIN_CORE_MALLOC_TUNING=0`` leaves glibc's defaults alone.
OPT_OUT_ENV = "GRAIN_CORE_MALLOC_TUNING"
#: Variables by which a user sets glibc's thresholds at start-up (then left as they are).
USER_SETTINGS = (
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_lock = threading.Lock()
_outcome: bool | None = None  # None: not tried yet in this process


def tune_malloc() -> bool:
    """Sets glibc's mmap and trim thresholds (see the module docstring) once per process; returns
    whether they are set by this module. Never raises."""
    global _outcome
    if _outcome is not None:
        return _outcome
    with _lock:
        if _outcome is None:
            _outcome = _tune()
    return _outcome


def _tune() -> bool:
    if os.environ.get(OPT_OUT_ENV, "1") == "0":
        return False
    if any(name in os.environ for name in USER_SETTINGS):
        return False
    try:
        if platform.libc_ver()[0] != "glibc":
            return False
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        mallopt.restype = ctypes.c_int
        # The mmap threshold first: setting either one ends glibc's dynamic adjustment.
        return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
            mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        )
    except Exception:  # no C library to call: the defaults stay
        return False
