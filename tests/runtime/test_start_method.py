"""Start methods: forkserver where it exists, else spawn; spawn works for mp_prefetch and the
DataLoader; a bad choice is an early clear error. (``nox -s tests-spawn`` runs a part of
tests/runtime and tests/dataloader with every worker spawned, ``nox -s tests-spawn-full`` all.)"""

from __future__ import annotations

import multiprocessing as mp

import pytest

import grain_core as grain
from grain_core.runtime import processes
from grain_core.runtime.processes import ProcessRuntime, default_start_method

pytestmark = pytest.mark.timeout(300)


def test_forkserver_where_it_exists_else_spawn(monkeypatch):
    monkeypatch.delenv(processes.START_METHOD_ENV, raising=False)
    assert default_start_method() == "forkserver"  # Linux
    monkeypatch.setattr(processes.mp, "get_all_start_methods", lambda: ["spawn"])  # Windows
    assert default_start_method() == "spawn"
    assert ProcessRuntime().context().get_start_method() == "spawn"


def test_the_environment_variable_picks_spawn(monkeypatch):
    monkeypatch.setenv(processes.START_METHOD_ENV, "spawn")
    assert default_start_method() == "spawn"
    assert ProcessRuntime(start_method="forkserver").context().get_start_method() == "forkserver"


def test_bad_choices_are_clear_errors(monkeypatch):
    monkeypatch.setenv(processes.START_METHOD_ENV, "fork")
    with pytest.raises(ValueError, match="must be 'forkserver' or 'spawn', got 'fork'"):
        default_start_method()
    monkeypatch.delenv(processes.START_METHOD_ENV)
    monkeypatch.setattr(processes.mp, "get_all_start_methods", lambda: ["spawn"])
    with pytest.raises(ValueError, match="does not exist on this platform.*use 'spawn'"):
        ProcessRuntime(start_method="forkserver").context()


def _square(x):
    return x * x


def test_mp_prefetch_with_spawned_workers():
    ds = grain.MapDataset.range(20).to_iter_dataset().map(_square)
    spawned = ds.mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2), runtime=ProcessRuntime(start_method="spawn")
    )
    with iter(spawned) as it:
        first = [next(it) for _ in range(7)]
        state = it.get_state()
    with iter(spawned) as it:
        it.set_state(state)
        rest = list(it)
    assert first + rest == [x * x for x in range(20)]
    assert not mp.active_children()


def test_dataloader_with_spawned_workers(monkeypatch):
    monkeypatch.setenv(processes.START_METHOD_ENV, "spawn")
    loader = grain.DataLoader(
        data_source=list(range(12)),
        sampler=grain.IndexSampler(12, shuffle=False, seed=0, num_epochs=1),
        worker_count=2,
    )
    with iter(loader) as it:
        assert sorted(it) == list(range(12))


_UNPICKLE_AFTER_PRELOAD = r"""
import sys
import grain_core._forkserver_preload  # what the forkserver has imported before any worker forks
import cloudpickle
before = set(sys.modules)
cloudpickle.loads(open(sys.argv[1], "rb").read())
print(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("grain_core", "numpy")))
"""


def test_a_dataloader_workers_pipeline_needs_no_import_after_the_forkserver_preload(tmp_path):
    """A DataLoader's worker unpickles its pipeline (sampler, source and operation stages) with
    every module already imported by the forkserver: each worker once spent ~12 ms importing them."""
    import json
    import subprocess
    import sys

    from grain_core.runtime.job import WorkerJob

    n = 40
    loader = grain.DataLoader(
        data_source=grain.sources.RangeDataSource(0, n, 1),
        sampler=grain.samplers.IndexSampler(
            n, shard_options=grain.sharding.NoSharding(), shuffle=True, seed=1, num_epochs=1
        ),
        operations=[grain.transforms.Batch(batch_size=4)],
        worker_count=0,
    )
    payload = tmp_path / "payload.bin"
    payload.write_bytes(
        WorkerJob.create(loader.dataset, grain.MultiprocessingOptions(num_workers=2)).payload
    )
    out = subprocess.run(
        [sys.executable, "-c", _UNPICKLE_AFTER_PRELOAD, str(payload)],
        capture_output=True, text=True, timeout=120, check=True,
    )
    assert json.loads(out.stdout.strip().replace("'", '"')) == []
