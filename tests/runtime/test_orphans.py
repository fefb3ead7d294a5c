"""Nothing outlives the job: workers exit when their parent dies, and shared-memory segments do not
stay in /dev/shm, whether the parent alone or the whole process group is killed (real SIGKILL /
SIGTERM of real processes). And a small /dev/shm (a real 4 MiB tmpfs in a private mount namespace)
falls back to pipes with a warning instead of dying of SIGBUS."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from runtime_helpers import alive

from grain_core.runtime import shm

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /dev/shm and prctl"),
]

_JOB = textwrap.dedent(
    """
    import json, multiprocessing.forkserver as fs, sys, time
    import numpy as np
    import grain_core as grain

    ds = (grain.MapDataset.range(10_000).map(lambda x: np.full((20_000,), x))
          .to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2,
                                                                     per_worker_buffer_size=4)))
    it = iter(ds)
    for _ in range(25):
        next(it)
    print(json.dumps({"pid": __import__("os").getpid(), "workers": it.worker_pids,
                      "forkserver": fs._forkserver._forkserver_pid}), flush=True)
    time.sleep(600)
    """
)


def _start_job():
    proc = subprocess.Popen(
        [sys.executable, "-c", _JOB],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a job under a scheduler
    )
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"the job did not start: {proc.stderr.read()}")
    return proc, json.loads(line)


def _segments(pid):
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"gcrt{pid}x")]


def _wait_gone(pids, limit=60.0):
    """Waits (up to a generous limit, not a speed claim) until none of ``pids`` runs."""
    deadline = time.monotonic() + limit
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def _kill_all(info):
    for p in [info["pid"], info["forkserver"], *info["workers"]]:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass


def test_sigkill_of_the_parent_alone_ends_workers_and_frees_segments():
    proc, info = _start_job()
    try:
        assert all(alive(p) for p in info["workers"])
        os.kill(info["pid"], signal.SIGKILL)
        proc.wait()
        assert _wait_gone([*info["workers"], info["forkserver"]]) == []
        assert _segments(info["pid"]) == []
    finally:
        _kill_all(info)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_whole_job_killed_leaves_no_process_and_no_segment(sig):
    proc, info = _start_job()
    try:
        os.killpg(proc.pid, sig)
        proc.wait()
        assert _wait_gone([*info["workers"], info["forkserver"]]) == []
        if sig == signal.SIGKILL:
            # Nobody could clean up: the consumer unlinked every segment it had opened; one a
            # worker created in the last instant is named after the dead consumer and reclaimed by
            # the next start of an mp_prefetch iterator on this machine (here: called directly).
            shm.reclaim_stale_shm()
        assert _segments(info["pid"]) == []
    finally:
        _kill_all(info)


def test_segments_are_unlinked_while_the_job_runs():
    proc, info = _start_job()
    try:
        # Both sides hold the segments open; their names are gone from /dev/shm (at most the
        # messages in flight that the consumer has not opened yet: 2 workers x 4 elements).
        assert len(_segments(info["pid"])) <= 8
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _kill_all(info)


_SMALL_SHM_JOB = textwrap.dedent(
    """
    import warnings
    import numpy as np
    import grain_core as grain

    warnings.simplefilter("always")
    ds = (grain.MapDataset.range(60).map(lambda x: np.full((1 << 17,), x))  # 1 MiB each
          .to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2,
                                                                     per_worker_buffer_size=3)))
    with iter(ds) as it:
        out = [int(a[0]) for a in it]
    assert out == list(range(60)), out
    print("OK")
    """
)


def _unshare() -> str | None:
    exe = shutil.which("unshare")
    if exe is None:
        return None
    probe = subprocess.run(
        [exe, "-m", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
        capture_output=True,
    )
    return exe if probe.returncode == 0 else None


@pytest.mark.parametrize("min_free_mb", [None, "0.5"])
def test_a_small_dev_shm_falls_back_to_pipes_with_a_warning(min_free_mb):
    exe = _unshare()
    if exe is None:
        pytest.skip(
            "needs `unshare -m` and mount rights (root or CAP_SYS_ADMIN) to mount a 4 MiB tmpfs "
            "on /dev/shm in a private mount namespace; test_fallback_threshold covers the logic"
        )
    env = dict(os.environ)
    env.pop("GRAIN_CORE_SHM_MIN_FREE_MB", None)
    if min_free_mb is not None:  # the start check passes; segments run out while producing
        env["GRAIN_CORE_SHM_MIN_FREE_MB"] = min_free_mb
    script = (
        "mount -t tmpfs -o size=4m tmpfs /dev/shm && exec \"$0\" -c \"$1\""
    )
    out = subprocess.run(
        [exe, "-m", "--propagation", "private", "sh", "-c", script, sys.executable,
         _SMALL_SHM_JOB],
        capture_output=True, text=True, env=env, timeout=200,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "OK"
    assert "Enlarge /dev/shm" in out.stderr and "--shm-size" in out.stderr


def test_fallback_threshold(monkeypatch):
    """The documented threshold, lowered free space simulated by raising it: same fallback."""
    import numpy as np
    from runtime_helpers import our_segments

    import grain_core as grain

    monkeypatch.setenv("GRAIN_CORE_SHM_MIN_FREE_MB", str(10**9))
    ds = (
        grain.MapDataset.range(20).map(lambda x: np.full((4096,), x)).to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    with pytest.warns(RuntimeWarning, match=r"/dev/shm has only .* Enlarge /dev/shm"):
        it = iter(ds)
    with it:
        out = []
        for a in it:
            assert our_segments() == []
            out.append(int(a[0]))
    assert out == list(range(20))
