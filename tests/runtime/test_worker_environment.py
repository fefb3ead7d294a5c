"""The worker-environment contract and the element buffer bound.

* Workers get the parent's ``sys.path`` exactly: the working directory only if the parent had it
  (``python -c`` and the REPL do; a script and ``python -P`` do not). Code planted in the working
  directory as a grain_core plugin is never imported unless the parent itself would.
* ``per_worker_buffer_size`` counts elements: a worker never runs further ahead of the consumer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from runtime_helpers import ahead_bound

import grain_core as grain

pytestmark = pytest.mark.timeout(180)

_TRAIN = textwrap.dedent(
    """
    import json, os, sys
    import grain_core as grain

    def where(x):
        return ["" in sys.path, os.getcwd() in sys.path]

    ds = grain.MapDataset.range(4).map(where).to_iter_dataset().mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2))
    with iter(ds) as it:
        seen = list(it)
    print(json.dumps({"parent": ["" in sys.path, os.getcwd() in sys.path], "workers": seen}))
    """
)


@pytest.fixture()
def planted(tmp_path):
    """A directory holding a module advertised as a grain_core plugin; importing it leaves a mark."""
    shared = tmp_path / "shared-dataset-dir"
    shared.mkdir()
    mark = tmp_path / "IMPORTED"
    (shared / "evil_plugin.py").write_text(f"open({str(mark)!r}, 'a').write('x')\n")
    dist = shared / "evil_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evil-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[grain_core]\nevil = evil_plugin\n")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "train.py").write_text(_TRAIN)
    return shared, mark, scripts / "train.py"


def _run(args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    out = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=150)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_a_script_never_imports_from_the_working_directory(planted, start_method, monkeypatch):
    shared, mark, script = planted
    monkeypatch.setenv("GRAIN_CORE_MP_START_METHOD", start_method)
    got = _run([sys.executable, str(script)], cwd=shared)
    assert got["parent"] == [False, False]
    assert got["workers"] == [[False, False]] * 4
    assert not mark.exists(), "a module from the working directory was imported"


def test_python_dash_capital_p_is_respected(planted):
    shared, mark, script = planted
    got = _run([sys.executable, "-P", "-c", script.read_text()], cwd=shared)
    assert got["parent"] == [False, False]
    assert got["workers"] == [[False, False]] * 4
    assert not mark.exists()


def test_workers_have_the_working_directory_when_the_parent_has_it(planted):
    shared, mark, script = planted
    got = _run([sys.executable, "-c", script.read_text()], cwd=shared)
    assert got["parent"][0] is True  # python -c puts '' on the path
    assert got["workers"] == [[True, False]] * 4


_ELEMENT_BYTES = 200_000


def _record(directory):
    def produce(x):
        with open(os.path.join(directory, f"produced-{os.getpid()}"), "a") as f:
            f.write("x")
        return np.full((_ELEMENT_BYTES // 8,), x)

    return produce


@pytest.mark.parametrize("k,buffer", [(2, 1), (2, 5), (3, 16)])
def test_per_worker_buffer_size_bounds_elements_produced_ahead(tmp_path, k, buffer):
    ds = (
        grain.MapDataset.range(10_000)
        .to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        .map(_record(str(tmp_path)))  # runs in the worker, once per element it produces
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=k, per_worker_buffer_size=buffer))
    )

    def produced():
        return sum(os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path))

    with iter(ds) as it:
        for consumed in (0, 1, 3, 40):
            while it.get_state()["position"] < consumed:
                next(it)
            if consumed == 0:
                it.start_prefetch()
            time.sleep(0.3)  # let the workers run ahead as far as they may (the bound holds anyway)
            # At most `buffer` finished elements per worker that next() has not returned, plus
            # the one each worker may be producing (more if they are small: ahead_bound).
            bound = ahead_bound(buffer, _ELEMENT_BYTES)
            assert produced() <= consumed + k * bound, (consumed, produced())
