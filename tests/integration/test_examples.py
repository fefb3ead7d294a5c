"""Every script under examples/ runs to completion on small local data (``--small``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = {
    "demo.py": "restored: the next 3 batches are identical",
    "arrayrecord_training.py": "batches are identical",
    "parquet_hierarchical_shuffle.py": "resumed from a checkpoint identically",
    "lm_packing.py": "positions are tokens",
    "mixing.py": "resumed from a checkpoint identically",
    "device_put_sharding.py": "batches of",
    "hf_datasets.py": "streaming: 4 shards, 200 rows; resumed identically",
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_example_runs(script):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.setdefault("GRAIN_CORE_BLOCK_PLUGINS", "broken")  # a deliberately broken test plugin
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--small"],
        capture_output=True, text=True, timeout=280, env=env, cwd=EXAMPLES.parent,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr}"
    assert SCRIPTS[script] in proc.stdout, proc.stdout
