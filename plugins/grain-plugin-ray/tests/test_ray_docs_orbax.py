"""docs/ray.md runs as written; a Ray iterator works under device_put and checkpoints with Orbax
into a processes iterator."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from grain_plugin_ray import RayRuntime
from ray_pipelines import pipeline

import grain_core as grain
from grain_core.testing.compare import assert_elements_equal

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

DOC = Path(__file__).resolve().parents[3] / "docs" / "ray.md"
MP = grain.MultiprocessingOptions


def test_docs_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/ray.md has no python example"
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), {"__name__": "ray_docs"})


def test_device_put_and_orbax_checkpoint_from_ray_to_processes(tmp_path):
    import jax
    import orbax.checkpoint as ocp

    def on_device(runtime):
        ds = pipeline().map(lambda e: e["v"]).mp_prefetch(MP(num_workers=2), runtime=runtime)
        return grain.experimental.device_put(ds, jax.devices("cpu")[0])

    with iter(on_device(None)) as it:
        reference = [x.tolist() for x in it]
    mngr = ocp.CheckpointManager(tmp_path / "ckpt")
    with iter(on_device(RayRuntime(num_cpus=0))) as it:
        head = [next(it) for _ in range(6)]
        assert all(isinstance(x, jax.Array) for x in head)
        mngr.save(6, args=grain.checkpoint.CheckpointSave(it), force=True)
        mngr.wait_until_finished()
    with iter(on_device(None)) as it:  # processes
        mngr.restore(6, args=grain.checkpoint.CheckpointRestore(it))
        got = [x.tolist() for x in head] + [x.tolist() for x in it]
    mngr.close()
    assert_elements_equal(reference, got, "Ray -> Orbax -> processes")
