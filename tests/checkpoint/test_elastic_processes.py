"""Elastic restore across JAX process counts: a checkpoint written by N processes (each reading
``base[p::N]`` and saving ``process_<p>-of-<N>.json``) restores on N' processes, every element of
the epoch read exactly once. In process (explicit process indices) and with 2 and 3 real JAX
processes (``jax.distributed.initialize`` with a loopback coordinator)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import grain_core as grain
from grain_core import checkpoint as gc
from grain_core.checkpoint.files import restore_across_process_counts

pytestmark = pytest.mark.timeout(180)

MP = grain.MultiprocessingOptions
M = 50


def _pipe(p, n, k, m=M, *, seed=1, shard=True, extra=None):
    ds = grain.MapDataset.range(m).seed(seed).shuffle()
    ds = ds[p::n] if shard else ds
    ds = ds.map(lambda x: int(x))
    if extra is not None:
        ds = extra(ds)
    it_ds = ds.to_iter_dataset().random_map(lambda x, r: x)
    return it_ds.mp_prefetch(MP(num_workers=k)) if k else it_ds


def _close(it):
    getattr(it, "close", lambda: None)()


def _save_all(tmp, n, k, steps, **kw):
    """Processes 0..n-1 read ``steps[p]`` elements each and write their state files."""
    read = []
    for p in range(n):
        it = iter(_pipe(p, n, k, **kw))
        read += [next(it) for _ in range(steps[p])]
        gc.write_state_file(tmp, it.get_state(), p, n)
        _close(it)
    return read


@pytest.mark.parametrize(
    ("n", "k", "n2", "k2"),
    [(2, 2, 3, 1), (3, 0, 2, 2), (1, 2, 3, 0), (3, 3, 1, 2), (2, 1, 2, 3)],
)
def test_every_element_once_across_process_counts(tmp_path, n, k, n2, k2):
    # Lockstep: every process read the same number of elements.
    read = _save_all(tmp_path, n, k, [6] * n)
    for p2 in range(n2):
        it = iter(_pipe(p2, n2, k2))
        if n2 == n:  # the same process count: the ordinary path, only the worker count changes
            it.set_state(gc.read_state_file(tmp_path, p2, n2))
        else:
            restore_across_process_counts(it, tmp_path, p2, n2)
        read += list(it)
        _close(it)
    assert sorted(read) == list(range(M))


def test_shards_read_to_their_end_are_a_prefix(tmp_path):
    # 50 = 17 + 17 + 16: processes 0 and 1 read one element more than process 2, all to the end.
    read = _save_all(tmp_path, 3, 2, [17, 17, 16])
    for p2 in range(2):
        it = iter(_pipe(p2, 2, 1))
        restore_across_process_counts(it, tmp_path, p2, 2)
        assert list(it) == []
        _close(it)
    assert sorted(read) == list(range(M))


def _refusal(tmp_path, error, match, *, steps=(4, 4), save_kw=None, kw=None):
    _save_all(tmp_path, 2, 2, list(steps), **(save_kw or {}))
    it = iter(_pipe(0, 3, 2, **(kw or {})))
    before = it.get_state()
    with pytest.raises(error, match=match) as e:
        restore_across_process_counts(it, tmp_path, 0, 3)
    assert it.get_state() == before
    _close(it)
    return str(e.value)


def test_refused_when_processes_did_not_read_a_prefix(tmp_path):
    msg = _refusal(tmp_path, gc.CheckpointProcessCountError, "not a prefix", steps=(5, 3))
    assert "written by 2 JAX process" in msg and "runs 3" in msg


def test_refused_without_strided_process_sharding(tmp_path):
    kw = {"shard": False}
    _refusal(tmp_path, gc.CheckpointProcessCountError, r"ds\[process_index::process_count\]", kw=kw)


def test_refused_with_a_shuffle_after_the_shard(tmp_path):
    kw = {"extra": lambda d: d.shuffle(seed=3)}
    _refusal(
        tmp_path,
        gc.CheckpointProcessCountError,
        "ShuffleMapDataset",
        save_kw=kw,
        kw=kw,
    )


def test_refused_with_a_filter(tmp_path):
    kw = {"extra": lambda d: d.filter(lambda x: x % 5)}
    _refusal(tmp_path, gc.CheckpointProcessCountError, "filter", save_kw=kw, kw=kw)


def test_refused_other_pipeline(tmp_path):
    _refusal(
        tmp_path,
        gc.CheckpointPipelineMismatchError,
        "fingerprint",
        save_kw={"seed": 1},
        kw={"seed": 2},
    )


def test_refused_incomplete_checkpoint(tmp_path):
    _save_all(tmp_path, 2, 2, [4, 4])
    os.unlink(tmp_path / "process_1-of-2.json")
    it = iter(_pipe(0, 3, 2))
    with pytest.raises(gc.CheckpointProcessCountError, match="process_1-of-2.json"):
        restore_across_process_counts(it, tmp_path, 0, 3)
    _close(it)


# --- real JAX processes --------------------------------------------------------------------------------

_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os, sys
    port, n, p, phase, ckpt, steps, out, api = sys.argv[1:]
    n, p, steps = int(n), int(p), int(steps)
    import jax
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=n, process_id=p,
        initialization_timeout=60,
    )
    import grain_core as grain
    shard = grain.sharding.ShardByJaxProcess()
    assert (shard.shard_index, shard.shard_count) == (p, n)
    ds = (
        grain.MapDataset.range(NUM).seed(1).shuffle()[shard.shard_index :: shard.shard_count]
        .map(lambda x: int(x)).to_iter_dataset().random_map(lambda x, r: x)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    it = iter(ds)
    item = os.path.join(ckpt, "1", "default")
    if api == "orbax":  # every process makes the manager: it synchronises them
        import orbax.checkpoint as ocp
        mngr = ocp.CheckpointManager(ckpt)
    if phase == "restore":
        if api == "orbax":
            mngr.restore(1, args=grain.checkpoint.CheckpointRestore(it))
        else:
            asyncio.run(it.load(item))
        got = list(it)
    else:
        got = [next(it) for _ in range(steps)]
        if api == "orbax":
            mngr.save(1, args=grain.checkpoint.CheckpointSave(it), force=True)
            mngr.wait_until_finished()
        else:
            asyncio.run(it.save(item))
    with open(out, "w") as f:
        json.dump(got, f)
    it.close()
    jax.distributed.shutdown()
    """
).replace("NUM", str(M))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_processes(tmp_path, n, phase, ckpt, steps, api, deadline_s=90):
    script = tmp_path / "proc.py"
    script.write_text(_SCRIPT)
    port = _free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("XLA_FLAGS", None)
    outs = [tmp_path / f"{phase}-{n}-{p}.json" for p in range(n)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(port),
                str(n),
                str(p),
                phase,
                str(ckpt),
                str(steps),
                str(outs[p]),
                api,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for p in range(n)
    ]
    try:
        deadline = time.monotonic() + deadline_s
        logs = []
        for proc in procs:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            logs.append(out.decode(errors="replace")[-3000:])
        for proc, log in zip(procs, logs):
            assert proc.returncode == 0, log
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.parametrize(("n", "n2", "steps", "api"), [(2, 3, 7, "orbax"), (3, 2, 5, "save_load")])
def test_real_jax_processes_restore_on_another_count(tmp_path, n, n2, steps, api):
    pytest.importorskip("jax")
    pytest.importorskip("orbax.checkpoint")
    ckpt = tmp_path / "ckpt"
    first = _run_processes(tmp_path, n, "save", ckpt, steps, api)
    files = sorted(f for f in os.listdir(ckpt / "1" / "default") if f.startswith("process_"))
    assert files == [f"process_{p}-of-{n}.json" for p in range(n)]
    rest = _run_processes(tmp_path, n2, "restore", ckpt, -1, api)
    everything = [x for part in first + rest for x in part]
    assert sorted(everything) == list(range(M))
    # Process p' of n2 continues its shard base[p'::n2] just after the n * steps elements read.
    assert [len(r) for r in rest] == [
        len(range(p, M, n2)) - len(range(p, n * steps, n2)) for p in range(n2)
    ]
