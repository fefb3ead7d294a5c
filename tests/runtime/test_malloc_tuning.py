"""glibc's malloc thresholds in the consumer and in the workers
(``grain_core.runtime.malloc_tuning``).

Elements copied out of shared memory and freed at the workers' rate must not page-fault afresh
each time: once an ``mp_prefetch`` iterator has run in a process, a stream of 256 KiB arrays
allocated and freed reuses the same pages (no minor faults), where glibc's defaults return them
to the kernel and fault them in again. The same holds inside a worker, whose map makes such
arrays and frees them once they are sent. ``GRAIN_CORE_MALLOC_TUNING=0`` and a user's own
``MALLOC_*_`` setting leave glibc's behaviour alone. Counted in fresh processes (the setting is
per process); the counts are the kernel's fault counters, not timings.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's (Linux)"
    ),
]

# Minor page faults of a stream of 256 KiB arrays allocated and freed.
_CHURN_FN = """
import resource
import numpy as np

def churn():
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        arrays = [np.ones(256 * 1024 // 8) for _ in range(8)]
        del arrays
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
"""

_CHURN = _CHURN_FN + """
churn()  # the first large frees move glibc's dynamic thresholds
import grain_core as grain
from grain_core.runtime import malloc_tuning
ds = grain.MapDataset.range(4).to_iter_dataset().mp_prefetch(
    grain.MultiprocessingOptions(num_workers=1)
)
assert list(ds) == [0, 1, 2, 3]
churn()
print(malloc_tuning.tune_malloc(), churn())
"""

# In a worker: the map churns like the consumer above, after the worker loop started.
_WORKER_CHURN = _CHURN_FN + """
import grain_core as grain
from grain_core.runtime import malloc_tuning

def in_worker(_):
    churn()  # the first large frees move glibc's dynamic thresholds
    faults = churn()
    return malloc_tuning.tune_malloc(), faults  # (the worker loop's outcome, kept once set)

ds = grain.MapDataset.range(1).map(in_worker).to_iter_dataset().mp_prefetch(
    grain.MultiprocessingOptions(num_workers=1)
)
((tuned, faults),) = list(ds)
print(tuned, faults)
"""


def _faults(script: str = _CHURN, **env: str) -> tuple[bool, int]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environ.pop("GRAIN_CORE_MALLOC_TUNING", None)
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=150, env=environ
    )
    assert out.returncode == 0, out.stderr
    tuned, faults = out.stdout.split()
    return tuned == "True", int(faults)


def test_elements_freed_by_the_consumer_are_reused_without_faults():
    tuned, faults = _faults()
    untuned, default_faults = _faults(GRAIN_CORE_MALLOC_TUNING="0")
    assert tuned and not untuned
    # glibc's defaults trim the freed top of the heap and fault it in again each round ...
    assert default_faults > 1000, default_faults
    # ... the thresholds set by the first consumer keep it.
    assert faults < default_faults // 10, (faults, default_faults)


def test_arrays_made_and_freed_in_a_worker_are_reused_without_faults():
    tuned, faults = _faults(_WORKER_CHURN)
    untuned, default_faults = _faults(_WORKER_CHURN, GRAIN_CORE_MALLOC_TUNING="0")
    assert tuned and not untuned
    assert default_faults > 1000, default_faults
    assert faults < default_faults // 10, (faults, default_faults)


def test_a_users_own_malloc_setting_stands():
    tuned, faults = _faults(MALLOC_TOP_PAD_="0")
    assert not tuned
    assert faults > 1000, faults  # glibc's behaviour under the user's setting, not ours
