"""grain_core.checkpoint: Orbax CheckpointManager flows (seeds 002/004), the file format and every
refusal (truncated, unknown version, other pipeline, other process count) leaving the iterator as
it was."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import grain_core as grain
from grain_core import checkpoint as gc


def _ds(n=1000, seed=42):
    return grain.MapDataset.range(n).seed(seed).shuffle().map(lambda x: x * 2).to_iter_dataset()


def _advance(it, n):
    return [next(it) for _ in range(n)]


def test_import_grain_core_does_not_import_orbax_or_jax():
    code = (
        "import sys, asyncio, tempfile, grain_core as g\n"
        "it = iter(g.MapDataset.range(5).to_iter_dataset()); next(it)\n"
        "d = tempfile.mkdtemp(); asyncio.run(it.save(d)); it2 = iter(g.MapDataset.range(5).to_iter_dataset())\n"
        "asyncio.run(it2.load(d)); assert next(it2) == 1\n"
        "assert 'orbax' not in sys.modules and 'jax' not in sys.modules, [m for m in sys.modules if m.startswith(('orbax', 'jax'))]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_orbax_manager_save_restore_like_grain_docs(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    it = iter(_ds())
    _advance(it, 4)
    mngr = ocp.CheckpointManager(str(tmp_path / "orbax"))
    assert mngr.save(step=4, args=gc.CheckpointSave(it), force=True)
    mngr.wait_until_finished()
    files = sorted(p.name for p in (tmp_path / "orbax" / "4" / "default").glob("*.json"))
    assert files == ["process_0-of-1.json"]
    expected = _advance(it, 4)
    mngr.restore(4, args=gc.CheckpointRestore(it))
    assert _advance(it, 4) == expected
    fresh = iter(_ds())
    ocp.CheckpointManager(str(tmp_path / "orbax")).restore(4, args=gc.CheckpointRestore(fresh))
    assert _advance(fresh, 4) == expected


def test_orbax_state_is_the_one_at_save_time(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    it = iter(_ds())
    _advance(it, 3)
    mngr = ocp.CheckpointManager(str(tmp_path))
    mngr.save(3, args=gc.CheckpointSave(it), force=True)
    expected = _advance(it, 5)  # moves on while the save may still be in flight
    mngr.wait_until_finished()
    fresh = iter(_ds())
    mngr.restore(3, args=gc.CheckpointRestore(fresh))
    assert _advance(fresh, 5) == expected


def test_orbax_composite_with_model_state(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    jnp = pytest.importorskip("jax.numpy")
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": np.ones(3, np.float32)}
    it = iter(_ds())
    _advance(it, 7)
    mngr = ocp.CheckpointManager(str(tmp_path))
    mngr.save(
        7,
        args=ocp.args.Composite(model=ocp.args.StandardSave(params), data=gc.CheckpointSave(it)),
        force=True,
    )
    mngr.wait_until_finished()
    expected = _advance(it, 3)
    fresh = iter(_ds())
    out = ocp.CheckpointManager(str(tmp_path)).restore(
        7,
        args=ocp.args.Composite(
            model=ocp.args.StandardRestore(params), data=gc.CheckpointRestore(fresh)
        ),
    )
    np.testing.assert_array_equal(out.model["w"], params["w"])
    assert _advance(fresh, 3) == expected


def test_save_load_without_orbax_and_file_format(tmp_path):
    it = iter(_ds())
    _advance(it, 2)
    pending = it.save(tmp_path)  # state taken here
    expected = _advance(it, 3)
    asyncio.run(pending)
    doc = json.loads((tmp_path / "process_0-of-1.json").read_text())
    assert doc["format"] == "grain_core.iterator_state" and doc["version"] == 1
    assert (doc["process_index"], doc["process_count"], doc["state_type"]) == (0, 1, "dict")
    assert not [p for p in os.listdir(tmp_path) if "tmp" in p]
    fresh = iter(_ds())
    asyncio.run(fresh.load(str(tmp_path)))
    assert _advance(fresh, 3) == expected


class _AwaitingPath:
    def __init__(self, path):
        self.path, self.awaited = path, False

    async def await_creation(self):
        self.path.mkdir(parents=True, exist_ok=True)
        self.awaited = True
        return self.path


def test_save_awaits_path_creation(tmp_path):
    it = iter(_ds())
    p = _AwaitingPath(tmp_path / "later")
    asyncio.run(gc.save_iterator_state(it, p))
    assert p.awaited and (tmp_path / "later" / "process_0-of-1.json").exists()


def _saved(tmp_path, n=5):
    it = iter(_ds())
    _advance(it, n)
    asyncio.run(it.save(tmp_path))
    return tmp_path / "process_0-of-1.json"


def _unchanged_after(exc, tmp_path, match):
    it = iter(_ds())
    _advance(it, 2)
    expected = _advance(iter(_ds()), 5)[2:]
    with pytest.raises(exc, match=match):
        asyncio.run(it.load(tmp_path))
    assert _advance(it, 3) == expected


def test_truncated_file_refused_iterator_unchanged(tmp_path):
    f = _saved(tmp_path)
    f.write_text(f.read_text()[:40])
    _unchanged_after(gc.CheckpointFormatError, tmp_path, "truncated or corrupted")


def test_unknown_version_refused(tmp_path):
    f = _saved(tmp_path)
    doc = json.loads(f.read_text())
    doc["version"] = 99
    f.write_text(json.dumps(doc))
    _unchanged_after(gc.CheckpointFormatError, tmp_path, "version 99")


def test_other_process_count_refused(tmp_path):
    f = _saved(tmp_path)
    f.rename(tmp_path / "process_0-of-2.json")
    _unchanged_after(gc.CheckpointProcessCountError, tmp_path, "written by 2 JAX process")


def test_missing_checkpoint(tmp_path):
    _unchanged_after(gc.CheckpointNotFoundError, tmp_path, "No grain_core iterator state")


def test_other_pipeline_refused_iterator_unchanged(tmp_path):
    other = iter(
        grain.MapDataset.range(50).seed(1).shuffle().map(lambda x: x * 2).to_iter_dataset()
    )
    _advance(other, 5)
    asyncio.run(other.save(tmp_path))
    _unchanged_after(gc.CheckpointPipelineMismatchError, tmp_path, "different pipeline")
    batched = iter(_ds().batch(2))
    asyncio.run(batched.save(tmp_path / "b"))
    _unchanged_after(gc.CheckpointPipelineMismatchError, tmp_path / "b", "BatchIterDataset")


class _BytesIterator:
    """Stands in for a DataLoader iterator: get_state() returns JSON bytes."""

    def __init__(self):
        self.pos = 0

    def __next__(self):
        self.pos += 1
        return self.pos

    def get_state(self):
        return json.dumps({"version": 2, "last_seen_indices": {"0": self.pos}}).encode()

    def set_state(self, state):
        self.pos = json.loads(state)["last_seen_indices"]["0"]


def test_bytes_states_round_trip(tmp_path):
    it = _BytesIterator()
    next(it), next(it)
    asyncio.run(gc.save_iterator_state(it, tmp_path))
    doc = json.loads((tmp_path / "process_0-of-1.json").read_text())
    assert doc["state_type"] == "json_bytes" and isinstance(doc["state"], str)
    fresh = _BytesIterator()
    asyncio.run(gc.load_iterator_state(fresh, tmp_path))
    assert fresh.pos == 2 and fresh.get_state() == it.get_state()


def test_bytes_state_via_orbax(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    it = _BytesIterator()
    next(it)
    mngr = ocp.CheckpointManager(str(tmp_path))
    mngr.save(1, args=gc.CheckpointSave(it), force=True)
    mngr.wait_until_finished()
    fresh = _BytesIterator()
    mngr.restore(1, args=gc.CheckpointRestore(fresh))
    assert fresh.pos == 1


def test_non_json_state_refused_at_save(tmp_path):
    class Bad(_BytesIterator):
        def get_state(self):
            return b"\x80 not json"

    with pytest.raises(TypeError, match="not UTF-8 JSON"):
        gc.save_iterator_state(Bad(), tmp_path)


def test_assert_equal_output_after_checkpoint_public():
    grain.testing.assert_equal_output_after_checkpoint(_ds(30))
    grain.experimental.assert_equal_output_after_checkpoint(_ds(30).batch(4))
