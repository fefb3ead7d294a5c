"""Two JAX processes (``jax.distributed.initialize`` on CPU, started here as separate interpreters)
each run the same pipeline sharded by ``ShardByJaxProcess`` with their own pool of Ray actors on
the one local Ray instance of the test session: together they read the dataset exactly once, and
each one's checkpoint restores its own shard exactly."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.timeout(420), pytest.mark.usefixtures("ray_local")]

HERE = os.path.dirname(os.path.abspath(__file__))
N = 26  # jax_process_driver.N


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_jax_process_reads_its_shard_with_its_own_actor_pool(ray_local):
    ray_address = ray_local.get_runtime_context().gcs_address
    coordinator = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    driver = os.path.join(HERE, "jax_process_driver.py")
    procs = [
        subprocess.Popen(
            [sys.executable, driver, str(i), coordinator, ray_address],
            env=env, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            try:
                out, err = p.communicate(timeout=360)  # a liveness bound, not a timing assertion
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                pytest.fail(f"a JAX process did not finish:\n{err[-4000:]}")
            assert p.returncode == 0, out[-2000:] + err[-5000:]
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [o["process_index"] for o in outputs] == [0, 1]
    assert all(o["process_count"] == 2 for o in outputs)
    xs = [[e["x"] for e in o["elements"]] for o in outputs]
    # Every element exactly once over both processes, each process only its own shard.
    assert sorted(xs[0] + xs[1]) == list(range(N))
    assert len(xs[0]) == len(xs[1]) == N // 2
    # Each process's state restores exactly: the elements after it, random draws included.
    for o in outputs:
        assert o["restored"] == o["elements"][5:]
    # Two actor pools of 2 workers each, one per JAX process.
    pools = [set(o["pool"]) for o in outputs]
    assert all(len(p) == 2 for p in pools) and not pools[0] & pools[1]
