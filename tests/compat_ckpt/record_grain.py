"""Records google grain 0.2.18's checkpoints into ``data/`` (run by hand, never by the tests).

Needs a venv with google's grain 0.2.18 and orbax-checkpoint (the one used: a copy of the project's
grain side venv plus ``orbax-checkpoint``)::

    /tmp/compat-ckpt-venv/bin/python tests/compat_ckpt/record_grain.py

Writes ``data/grain_0_2_18_states.json`` (for every case of ``cases.py``: the state Grain's
iterator returned after ``steps`` elements and every element after it) and ``data/orbax/``: Orbax
``CheckpointManager`` directories written through ``grain.python.PyGrainCheckpointSave``, with
the elements Grain yields after each saved step in ``data/grain_0_2_18_orbax.json``.
"""

from __future__ import annotations

import json
import logging
import pathlib
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE))

import cases  # noqa: E402  (this directory, not an installed package)

#: Orbax checkpoints: name -> (case source, steps before saving).
ORBAX = {
    "dataloader_no_workers": cases._loader(
        "dataloader_no_workers",
        3,
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 16, 1), sampler=gp.IndexSampler("
        "num_records=16, shard_options=gp.NoSharding(), shuffle=True, num_epochs=1, seed=11), "
        "operations=[Times10(), gp.Batch(2)], worker_count=0)",
    ),
    "dataloader_2_workers": cases._loader(
        "dataloader_2_workers",
        3,
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 16, 1), sampler=gp.IndexSampler("
        "num_records=16, shard_options=gp.NoSharding(), shuffle=True, num_epochs=1, seed=11), "
        "operations=[gp.Batch(2)], worker_count=2)",
    ),
    "dataset_iterator": cases._dataset(
        "dataset_iterator",
        4,
        "grain.MapDataset.range(15).shuffle(seed=4).map(lambda x: x + 1).to_iter_dataset().batch(3)",
    ),
    "mp_prefetch_iterator": cases._dataset(
        "mp_prefetch_iterator",
        5,
        "grain.MapDataset.range(15).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2))",
    ),
}


def _record_states(grain, gp, np) -> dict:
    out = {}
    for group, group_cases in cases.ALL.items():
        recorded = []
        for case in group_cases:
            it = iter(cases.build(case, grain, gp, np))
            before = cases.take(it, case.steps)
            state = it.get_state()
            if isinstance(state, bytes):
                state = json.loads(state.decode())
            after = cases.rest(it)
            recorded.append(
                {"name": case.name, "before": before, "state": state, "after": after}
            )
            if hasattr(it, "close"):
                it.close()
        out[group] = recorded
    return out


def _record_orbax(grain, gp, np) -> dict:
    import orbax.checkpoint as ocp

    root = DATA / "orbax"
    shutil.rmtree(root, ignore_errors=True)
    out = {}
    for name, case in ORBAX.items():
        it = iter(cases.build(case, grain, gp, np))
        before = cases.take(it, case.steps)
        directory = root / name
        with ocp.CheckpointManager(directory) as mngr:
            mngr.save(case.steps, args=ocp.args.Composite(iter=gp.PyGrainCheckpointSave(it)))
            mngr.wait_until_finished()
        after = cases.rest(it)
        out[name] = {"code": case.code, "steps": case.steps, "before": before, "after": after}
        if hasattr(it, "close"):
            it.close()
    return out


def main() -> None:
    from absl import flags

    flags.FLAGS(sys.argv[:1])  # Grain's multiprocessing reads absl flags
    import grain
    import grain.python as gp
    import numpy as np

    logging.disable(logging.CRITICAL)
    comment = (
        f"Recorded from google grain {grain.__version__} by tests/compat_ckpt/record_grain.py; "
        "do not edit by hand."
    )
    states = {"_comment": comment, **_record_states(grain, gp, np)}
    (DATA / "grain_0_2_18_states.json").write_text(json.dumps(states, indent=1) + "\n")
    orbax = {"_comment": comment, **_record_orbax(grain, gp, np)}
    (DATA / "grain_0_2_18_orbax.json").write_text(json.dumps(orbax, indent=1) + "\n")


if __name__ == "__main__":
    main()
