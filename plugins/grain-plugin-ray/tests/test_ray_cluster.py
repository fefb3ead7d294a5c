"""A two-node Ray cluster on this host (``ray start --head`` and ``ray start --address``, each its
own process group, torn down at the end): actors requesting a custom resource run on the second
node, produce the right elements and restore a state there."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

pytestmark = pytest.mark.timeout(420)

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli() -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts"]


def stop(proc: subprocess.Popen) -> None:
    """Stops a ``ray start --block`` process and everything in its process group."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # anything left in the group (workers of the node)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def start_node(cmd, env, tmp, name, procs, attempts: int = 3) -> None:
    """Starts one ``ray start --block`` node and waits until it reports it is running. Ray gives a
    raylet a fixed 30 s to register, which an overloaded host can miss: the node process then exits
    and is started again (only that failure; anything else fails the test)."""
    log_path = os.path.join(tmp, f"{name}.log")
    for _ in range(attempts):
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                cmd, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
            )
        procs.append(proc)
        deadline = time.monotonic() + 300  # a liveness bound, not a timing assertion
        while time.monotonic() < deadline:
            with open(log_path) as f:
                text = f.read()
            if "Ray runtime started" in text:
                return
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        stop(proc)
        if "timed out during startup" not in text:
            break
    raise AssertionError(f"ray start ({name}) did not come up:\n{text[-3000:]}")


@pytest.fixture(scope="module")
def two_node_cluster():
    # A short temp dir (Ray's socket paths must fit in 107 bytes) of our own, so that the address
    # file this cluster writes never makes another ray.init() on this host connect to it.
    tmp = tempfile.mkdtemp(prefix="grray", dir="/tmp")
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",  # loopback test cluster
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_worker_niceness": "0",  # as conftest.SYSTEM_CONFIG: workers not starved by load
    }
    env.pop("RAY_ADDRESS", None)
    port = free_port()
    common = [
        "--block", "--num-cpus", "1", "--temp-dir", tmp, "--disable-usage-stats",
        "--node-ip-address", "127.0.0.1",
    ]
    head = [
        *ray_cli(), "start", "--head", "--port", str(port), "--include-dashboard=false",
        "--ray-client-server-port", str(free_port()), "--resources", '{"head_node": 1}', *common,
    ]
    second = [
        *ray_cli(), "start", "--address", f"127.0.0.1:{port}", "--resources",
        '{"second_node": 1}', *common,
    ]
    procs: list[subprocess.Popen] = []
    try:
        for name, cmd in (("head", head), ("node2", second)):
            start_node(cmd + ["--dashboard-agent-listen-port", str(free_port())], env, tmp, name,
                       procs)
        yield f"127.0.0.1:{port}", env, tmp
    finally:
        for p in reversed(procs):  # the second node first, then the head
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


def logs(tmp: str) -> str:
    out = []
    for name in ("head.log", "node2.log"):
        try:
            with open(os.path.join(tmp, name)) as f:
                out.append(f"--- {name}\n" + f.read()[-3000:])
        except OSError:
            pass
    return "\n".join(out)


def test_actors_run_on_the_second_node(two_node_cluster):
    address, env, tmp = two_node_cluster
    try:
        out = subprocess.run(
            [sys.executable, os.path.join(HERE, "two_node_driver.py"), address],
            env=env, capture_output=True, text=True, timeout=360, cwd=HERE,
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"the driver did not finish: {err[-4000:]}\n{logs(tmp)}")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:] + logs(tmp)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["nodes"] == 2, seen
    (second,) = seen["second"]
    assert seen["placed"] == [second, second], seen
    assert seen["elements"] == [3 * x for x in range(40)]
    assert seen["left"] == []
