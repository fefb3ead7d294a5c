"""DataLoader iterators through the real Orbax ``CheckpointManager`` (0 and 2 worker processes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import grain_core as grain
from grain_core import checkpoint as gc

ocp = pytest.importorskip("orbax.checkpoint")


def _loader(workers: int) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=list(range(50)),
        sampler=grain.IndexSampler(50, shuffle=True, seed=7, num_epochs=2),
        operations=[grain.transforms.Batch(4)],
        worker_count=workers,
        read_options=grain.ReadOptions(num_threads=1, prefetch_buffer_size=4),
    )


def _take(it, n):
    return [np.asarray(next(it)).tolist() for _ in range(n)]


@pytest.mark.parametrize("workers", [0, 2])
def test_orbax_manager_saves_and_restores_a_dataloader_iterator(tmp_path, workers, request):
    if workers:
        request.getfixturevalue("has_runtime")
    it = iter(_loader(workers))
    _take(it, 5)
    mngr = ocp.CheckpointManager(str(tmp_path / "ckpt"))
    assert mngr.save(step=5, args=gc.CheckpointSave(it), force=True)
    mngr.wait_until_finished()
    doc = json.loads((tmp_path / "ckpt" / "5" / "default" / "process_0-of-1.json").read_text())
    assert "DataLoaderIterator" in json.dumps(doc)
    expected = _take(it, 8)  # the saved state is the one at save time
    # into the same iterator, moved on since
    mngr.restore(5, args=gc.CheckpointRestore(it))
    assert _take(it, 8) == expected
    it.close()
    # into a fresh iterator of a fresh loader, through a fresh manager
    fresh = iter(_loader(workers))
    try:
        ocp.CheckpointManager(str(tmp_path / "ckpt")).restore(
            5, args=gc.CheckpointRestore(fresh)
        )
        assert _take(fresh, 8) == expected
    finally:
        fresh.close()
    mngr.close()


def test_orbax_restore_refuses_another_loader(tmp_path):
    it = iter(_loader(0))
    _take(it, 2)
    mngr = ocp.CheckpointManager(str(tmp_path))
    mngr.save(2, args=gc.CheckpointSave(it), force=True)
    mngr.wait_until_finished()
    other = iter(
        grain.DataLoader(
            data_source=list(range(50)),
            sampler=grain.IndexSampler(50, shuffle=True, seed=8, num_epochs=2),
            operations=[grain.transforms.Batch(4)],
        )
    )
    with pytest.raises(Exception, match="pipeline|sampler|seed"):
        mngr.restore(2, args=gc.CheckpointRestore(other))
    mngr.close()
