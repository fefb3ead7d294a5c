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
    }
    env.pop("RAY_ADDRESS", None)
    port = free_port()
    common = ["--block", "--num-cpus", "1", "--temp-dir", tmp, "--disable-usage-stats"]
    procs = []
    try:
        procs.append(
            subprocess.Popen(
                [*ray_cli(), "start", "--head", "--port", str(port), "--include-dashboard=false",
                 "--ray-client-server-port", str(free_port()),
                 "--dashboard-agent-listen-port", str(free_port()),
                 "--resources", '{"head_node": 1}', *common],
                env=env, start_new_session=True,
                stdout=open(os.path.join(tmp, "head.log"), "w"), stderr=subprocess.STDOUT,
            )
        )
        procs.append(
            subprocess.Popen(
                [*ray_cli(), "start", "--address", f"127.0.0.1:{port}",
                 "--dashboard-agent-listen-port", str(free_port()),
                 "--resources", '{"second_node": 1}', *common],
                env=env, start_new_session=True,
                stdout=open(os.path.join(tmp, "node2.log"), "w"), stderr=subprocess.STDOUT,
            )
        )
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
