"""Grain's public tutorials, written as ``import grain`` scripts, run on grain_core and compared with Grain.

``tests/tutorials/scripts/`` holds one script per tutorial (dataset basics, dataset advanced, DataLoader guide, the
ArrayRecord and Parquet data-source tutorials) and a MaxText-style pipeline (ArrayRecord mixture,
Parquet and TFRecord interleaves, packing, ``mp_prefetch`` workers, state restore, ``DataLoader``
with workers and custom samplers). Each makes its own
small local data and records what the tutorial prints (element values, orders, states) with
``tutorial_io.show``. ``tests/tutorials/record_tutorial_outputs.py`` ran them under google grain
0.2.18 into ``tests/tutorials/data/grain_0_2_18_tutorials.json``; here each script runs unmodified
in a fresh interpreter through ``python -m grain_core.compat run`` (the ``import grain`` alias), and
every recorded value must be equal.

There is no known difference: every recorded value must equal Grain's (no xfail, no probe), so a
change of order or content anywhere in these tutorials fails here.

Iterator states are compared on Grain's fields: grain_core's states hold Grain's fields with the
same values plus validation fields (``kind``, ``fingerprint``, ``length``, ``stages``; see
docs/checkpointing.md).
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("array_record")
pytest.importorskip("tensorflow_datasets")
pytest.importorskip("orbax.checkpoint")

pytestmark = pytest.mark.timeout(900)

TUTORIALS = pathlib.Path(__file__).parent.parent / "tutorials"
RECORDED = json.loads((TUTORIALS / "data" / "grain_0_2_18_tutorials.json").read_text())
SCRIPTS = sorted(k for k in RECORDED if not k.startswith("_"))

# Keys that hold iterator states: compared on Grain's fields only.
STATE_KEYS = {("dataset_basic", "checkpoint")}


@functools.cache
def _run(script: str, workdir: str) -> tuple[int, str, dict]:
    results = os.path.join(workdir, "results.json")
    env = dict(os.environ, TUTORIAL_RESULTS=results, JAX_PLATFORMS="cpu")
    env.pop("GRAIN_CORE_AS_GRAIN", None)
    proc = subprocess.run(
        [sys.executable, "-m", "grain_core.compat", "run", str(TUTORIALS / "scripts" / f"{script}.py")],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=600,
    )
    recorded = json.loads(pathlib.Path(results).read_text()) if os.path.exists(results) else {}
    return proc.returncode, proc.stderr, recorded


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Runs a script once per module (in its own directory) and returns (rc, stderr, recorded)."""
    dirs: dict[str, str] = {}

    def run(script: str) -> tuple[int, str, dict]:
        if script not in dirs:
            dirs[script] = str(tmp_path_factory.mktemp(script))
        return _run(script, dirs[script])

    return run


@pytest.mark.parametrize("script", SCRIPTS)
def test_tutorial_script_runs_to_the_end(script, ran):
    rc, stderr, recorded = ran(script)
    assert rc == 0, stderr[-4000:]
    assert recorded.get("_done") is True
    assert sorted(recorded) == sorted(RECORDED[script])


CASES = [
    pytest.param(script, key, id=f"{script}-{key}")
    for script in SCRIPTS
    for key in sorted(RECORDED[script])
    if key != "_done"
]


@pytest.mark.parametrize(("script", "key"), CASES)
def test_tutorial_output_matches_grain(script, key, ran):
    _, stderr, recorded = ran(script)
    assert key in recorded, f"{script} did not reach {key!r}:\n{stderr[-3000:]}"
    grain_value = RECORDED[script][key]
    ours = recorded[key]
    if (script, key) in STATE_KEYS:
        # Our documented state: Grain's fields with Grain's values, plus validation fields.
        ours = {k: ours[k] for k in grain_value if k in ours}
    assert ours == grain_value


@pytest.mark.parametrize("part", ["mixture", "parquet", "tfrecord"])
def test_maxtext_hosts_read_grains_records_between_them(part, ran):
    """Whatever the order, the two hosts of each MaxText source read the records Grain's hosts read
    (the mixture's selection included), each host as many as in Grain."""
    _, stderr, recorded = ran("maxtext_pipeline")
    assert f"{part}_host1" in recorded, stderr[-3000:]
    grain_hosts = [RECORDED["maxtext_pipeline"][f"{part}_host{h}"] for h in (0, 1)]
    ours = [recorded[f"{part}_host{h}"] for h in (0, 1)]
    assert [len(h) for h in ours] == [len(h) for h in grain_hosts]
    assert sorted(ours[0] + ours[1]) == sorted(grain_hosts[0] + grain_hosts[1])


def test_maxtext_packed_pipeline_resumes_where_it_saved(ran):
    """The packed, batched ``mp_prefetch`` pipeline restored from its state after two batches gives
    the same remaining batches as the uninterrupted run (as it does in Grain)."""
    _, stderr, recorded = ran("maxtext_pipeline")
    assert "packed_rest_targets_after_restore" in recorded, stderr[-3000:]
    assert recorded["packed_rest_targets"]
    assert recorded["packed_rest_targets_after_restore"] == recorded["packed_rest_targets"]


def _leaves(value) -> list[str]:
    """Every scalar of a recorded value (array elements included), as JSON text."""
    if isinstance(value, dict) and set(value) == {"array", "dtype"}:
        return _leaves(value["array"])
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in _leaves(value[k])]
    if isinstance(value, list):
        return [x for item in value for x in _leaves(item)]
    return [json.dumps(value)]


# Values that hold whole epochs (or a fixed count from each mixed component): they hold Grain's
# elements whatever the order, so a failure here too says the elements differ, not only their order.
ORDER_FREE = [
    ("dataset_basic", ("list_source_all",)),
    ("dataset_basic", ("custom_source_all",)),
    ("dataset_advanced", ("hierarchical_first_5", "hierarchical_rest")),
    ("dataset_advanced", ("iter_mix_ids",)),
    ("dataset_advanced", ("repeat_mix_ids",)),
]


@pytest.mark.parametrize(
    ("script", "keys"), [pytest.param(s, k, id=f"{s}-{'+'.join(k)}") for s, k in ORDER_FREE]
)
def test_tutorial_output_holds_grains_elements(script, keys, ran):
    _, stderr, recorded = ran(script)
    assert all(k in recorded for k in keys), stderr[-3000:]
    ours = sorted(x for k in keys for x in _leaves(recorded[k]))
    assert ours == sorted(x for k in keys for x in _leaves(RECORDED[script][k]))
