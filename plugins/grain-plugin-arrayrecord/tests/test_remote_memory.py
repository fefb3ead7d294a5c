"""The remote reader's range buffers reuse their pages: a shuffled read allocates and frees buffers
of up to ``remote.MAX_REQUEST`` bytes per call, which with glibc's default thresholds were trimmed
back to the kernel and faulted in afresh on every call (about 3 us of a 5 us record over
``memory://``). ``RemoteReader`` sets the kernel's thresholds (``grain_core.author.tune_malloc``)
in the reading process. Counted in fresh processes (the setting is per process) with the kernel's
fault counter, not timings; the files are written by array_record's writer in this process, whose
own allocations would move glibc's thresholds in the reading one."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's (Linux)"
    ),
]

_READ = """
import resource, sys
import fsspec
import numpy as np
from grain_plugin_arrayrecord import ArrayRecordDataSource
from grain_core.runtime import malloc_tuning

path = sys.argv[1]
fsspec.filesystem("memory").pipe("/malloc/a.array_record", open(path, "rb").read())
src = ArrayRecordDataSource(["memory://malloc/a.array_record"])
order = np.random.default_rng(0).permutation(len(src)).tolist()

def epoch():
    for s in range(0, len(order), 4096):
        assert len(src.__getitems__(order[s : s + 4096])) == len(order[s : s + 4096])

epoch()  # the index, and glibc's dynamic thresholds moved by the first large frees
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    epoch()
print(malloc_tuning.tune_malloc(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@pytest.fixture(scope="module")
def eight_mib_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("remote_memory") / "a.array_record"
    w = ArrayRecordWriter(str(path), "group_size:1")
    rng = np.random.default_rng(0)
    for _ in range(8192):
        w.write(rng.bytes(1024))
    w.close()
    return path


def _faults(path, **env: str) -> tuple[bool, int]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environ.pop("GRAIN_CORE_MALLOC_TUNING", None)
    environ.update(env)
    out = subprocess.run(
        [sys.executable, "-c", _READ, str(path)],
        capture_output=True,
        text=True,
        timeout=150,
        env=environ,
    )
    assert out.returncode == 0, out.stderr
    tuned, faults = out.stdout.split()
    return tuned == "True", int(faults)


def test_range_buffers_are_reused_without_faults(eight_mib_file):
    tuned, faults = _faults(eight_mib_file)
    untuned, default_faults = _faults(eight_mib_file, GRAIN_CORE_MALLOC_TUNING="0")
    assert tuned and not untuned
    # glibc's defaults return the freed buffers' pages and fault them in again each call ...
    assert default_faults > 3000, default_faults
    # ... the thresholds the reader sets keep them.
    assert faults < default_faults // 10, (faults, default_faults)
