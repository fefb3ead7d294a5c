"""The checkpoint property over kernel stages plus every plugin/runtime stage that imports:
thread prefetch, mp_prefetch (0-2 workers, several per-worker buffers), device_put (CPU and
device buffers, 0 included), interleave, window shuffle (map and iter), first-fit packing. Random pipelines checkpoint at a random step and restore, in this process and in a new
one, into fresh iterators that must continue element for element."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile

import pytest
from hypothesis import Phase, given
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "checkpoint"))
import ckpt_pipelines as cp  # noqa: E402

from grain_core.testing.compare import assert_elements_equal  # noqa: E402

AVAILABLE, MISSING = cp.available_optional()
SPECS = cp.strategies(optional=AVAILABLE)
SHAPES: set = set()
STAGES_SEEN: set = set()


def _stages(spec):
    for s in spec:
        STAGES_SEEN.add(s["op"])
        for key in ("other", "sub"):
            if key in s:
                _stages(s[key])


@pytest.fixture(scope="module", autouse=True)
def _report_shapes(request):
    yield
    lines = [
        f"checkpoint property (with plugins): {len(SHAPES)} distinct pipeline shapes, stages seen "
        f"{sorted(STAGES_SEEN)}, profile {os.environ.get('GRAIN_CORE_HYPOTHESIS_PROFILE', 'ci')}",
    ]
    if MISSING:
        lines.append(f"optional stages not importable, left out: {MISSING}")
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capman = request.config.pluginmanager.getplugin("capturemanager")
    quiet = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
    with quiet:
        for line in lines:
            if reporter is not None:
                reporter.write_line(line)
    out = os.environ.get("GRAIN_CORE_SHAPES_FILE")
    if out:
        with open(out, "a") as f:
            f.write(
                json.dumps(
                    {
                        "suite": "integration",
                        "shapes": len(SHAPES),
                        "stages": sorted(STAGES_SEEN),
                        "missing": MISSING,
                    }
                )
                + "\n"
            )


@cp.hypothesis_settings()
@given(spec=SPECS, fraction=st.floats(0, 1))
def test_restore_continues_identically_with_plugins(spec, fraction):
    SHAPES.add(cp.shape(spec))
    _stages(spec)
    with tempfile.TemporaryDirectory() as d:
        step, rest, head = cp.run_and_checkpoint(spec, fraction, d)
        exhausted = len(head) < cp.MAX_ELEMENTS
        got = cp.restore_rest(spec, d, len(rest) + (1 if exhausted else 0))
        assert_elements_equal(rest, got, f"restored at step {step} of {json.dumps(spec)}")


@cp.hypothesis_settings(
    ci=dict(max_examples=4),
    nightly=dict(max_examples=20),
    dev=dict(max_examples=1),
    phases=[Phase.explicit, Phase.generate],  # no shrinking: every step would spawn a process
)
@given(specs=st.lists(st.tuples(SPECS, st.floats(0, 1)), min_size=5, max_size=5))
def test_restore_in_new_process_with_plugins(specs):
    for spec, _ in specs:
        SHAPES.add(cp.shape(spec))
        _stages(spec)
    cp.assert_restores_in_child(specs, timeout=300)
