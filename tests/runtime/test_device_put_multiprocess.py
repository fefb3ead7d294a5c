"""device_put in a multi-process JAX run: each process's batch becomes its local part of one global
array (two real JAX processes on loopback, two CPU devices each)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(180)

PROCESS = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    port, p = sys.argv[1], int(sys.argv[2])
    import jax
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=p,
        initialization_timeout=60,
    )
    import grain_core as grain
    mesh = jax.sharding.Mesh(np.array(jax.devices()), axis_names=("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    local = grain.MapDataset.range(32)[p::2].batch(4).to_iter_dataset()
    ds = grain.experimental.device_put(local, sharding, cpu_buffer_size=2, device_buffer_size=2)
    out = []
    for expected, arr in zip(local, ds):
        shards = sorted(arr.addressable_shards, key=lambda s: s.index[0].start)
        mine = np.concatenate([np.asarray(s.data) for s in shards])
        out.append({
            "global_shape": list(arr.shape),
            "local": mine.tolist(),
            "expected": np.asarray(expected).tolist(),
            "devices": len(arr.sharding.device_set),
        })
    print("RESULT" + json.dumps(out))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_process_contributes_its_local_batch():
    port = _free_port()
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS, str(port), str(p)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for p in range(2)
    ]
    try:
        outputs = [proc.communicate(timeout=150) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    results = []
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
        line = next(ln for ln in out.splitlines() if ln.startswith("RESULT"))
        results.append(json.loads(line[len("RESULT") :]))
    for rows in results:
        assert len(rows) == 4
        for row in rows:
            assert row["global_shape"] == [8]  # two processes x 4 local rows
            assert row["devices"] == 4
            assert row["local"] == row["expected"]
    everything = sorted(x for rows in results for row in rows for x in row["local"])
    assert everything == list(range(32))
