"""Orbax checkpoints written by google grain 0.2.18 restore into grain_core at the same position.

``data/orbax/<case>/<step>/`` are ``CheckpointManager`` directories written by google grain 0.2.18
with ``grain.python.PyGrainCheckpointSave`` (inside ``ocp.args.Composite(iter=...)``, as MaxText
does) by ``record_grain.py``; ``data/grain_0_2_18_orbax.json`` holds each pipeline's source and the
elements Grain yielded after the saved step. Real Orbax, no Grain needed.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil

import numpy as np
import orbax.checkpoint as ocp
import pytest

import grain_core as grain
import grain_core.python as gp
from grain_core.checkpoint import CheckpointPipelineMismatchError, load_iterator_state

from . import cases

DATA = pathlib.Path(__file__).parent / "data"
RECORDED = {
    k: v
    for k, v in json.loads((DATA / "grain_0_2_18_orbax.json").read_text()).items()
    if not k.startswith("_")
}


def _case(name: str) -> cases.Case:
    record = RECORDED[name]
    return cases.Case(name, record["code"], record["steps"])


def _copy(name: str, tmp_path: pathlib.Path) -> pathlib.Path:
    target = tmp_path / name
    shutil.copytree(DATA / "orbax" / name, target)
    return target


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_checkpoint_manager_restores_grains_checkpoint(name, tmp_path):
    record = RECORDED[name]
    directory = _copy(name, tmp_path)
    it = iter(cases.build(_case(name), grain, gp, np))
    try:
        with ocp.CheckpointManager(directory) as mngr:
            assert mngr.latest_step() == record["steps"]
            mngr.restore(
                record["steps"], args=ocp.args.Composite(iter=gp.PyGrainCheckpointRestore(it))
            )
        assert cases.rest(it) == record["after"]
    finally:
        it.close()


@pytest.mark.parametrize("name", ["dataloader_2_workers", "dataset_iterator"])
def test_load_reads_the_state_file_grain_wrote(name, tmp_path):
    record = RECORDED[name]
    directory = _copy(name, tmp_path) / str(record["steps"]) / "iter"
    it = iter(cases.build(_case(name), grain, gp, np))
    try:
        asyncio.run(load_iterator_state(it, directory))
        assert cases.rest(it) == record["after"]
    finally:
        it.close()


def test_grain_checkpoint_of_another_pipeline_is_refused_unchanged(tmp_path):
    # The mp_prefetch checkpoint (2 workers) restored into a dataset iterator of another shape.
    directory = _copy("mp_prefetch_iterator", tmp_path) / "5" / "iter"
    it = iter(grain.MapDataset.range(15).to_iter_dataset().batch(2).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=3)))
    try:
        before = it.get_state()
        with pytest.raises(CheckpointPipelineMismatchError, match="num_workers=2"):
            asyncio.run(load_iterator_state(it, directory))
        assert it.get_state() == before
    finally:
        it.close()


def test_handler_restores_grains_item_directory(tmp_path):
    name = "dataloader_no_workers"
    record = RECORDED[name]
    directory = _copy(name, tmp_path) / str(record["steps"]) / "iter"
    it = iter(cases.build(_case(name), grain, gp, np))
    try:
        handler = gp.PyGrainCheckpointHandler()
        assert handler.restore(directory, args=gp.PyGrainCheckpointRestore(it)) is it
        assert cases.rest(it) == record["after"]
    finally:
        it.close()
