"""Property: for random kernel pipelines, a checkpoint at a random step restores (in this process
and in a new one) into a fresh iterator that continues with exactly the original elements."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

import ckpt_pipelines as cp
import pytest
from hypothesis import Phase, given
from hypothesis import strategies as st

from grain_core.testing.compare import assert_elements_equal

SPECS = cp.strategies(optional=())
SHAPES: set = set()


@pytest.fixture(scope="module", autouse=True)
def _report_shapes(request):
    yield
    line = (
        f"checkpoint property (kernel stages): {len(SHAPES)} distinct pipeline shapes, profile "
        f"{os.environ.get('GRAIN_CORE_HYPOTHESIS_PROFILE', 'ci')}"
    )
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    capman = request.config.pluginmanager.getplugin("capturemanager")
    quiet = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
    if reporter is not None:
        with quiet:
            reporter.write_line("")
            reporter.write_line(line)
    out = os.environ.get("GRAIN_CORE_SHAPES_FILE")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"suite": "kernel", "shapes": len(SHAPES)}) + "\n")


def _check(spec, fraction):
    SHAPES.add(cp.shape(spec))
    with tempfile.TemporaryDirectory() as d:
        step, rest, head = cp.run_and_checkpoint(spec, fraction, d)
        assert_elements_equal(head[step : step + len(rest)], rest[: len(head) - step], "re-read")
        exhausted = len(head) < cp.MAX_ELEMENTS
        got = cp.restore_rest(spec, d, len(rest) + (1 if exhausted else 0))
        assert_elements_equal(rest, got, f"restored at step {step} of {json.dumps(spec)}")


@cp.hypothesis_settings()
@given(spec=SPECS, fraction=st.floats(0, 1))
def test_restore_continues_identically(spec, fraction):
    _check(spec, fraction)


@cp.hypothesis_settings(
    ci=dict(max_examples=4),
    nightly=dict(max_examples=20),
    dev=dict(max_examples=1),
    phases=[Phase.explicit, Phase.generate],  # no shrinking: every step would spawn a process
)
@given(specs=st.lists(st.tuples(SPECS, st.floats(0, 1)), min_size=6, max_size=6))
def test_restore_in_new_process(specs):
    """Six pipelines per example are checkpointed here and restored by one child process that
    rebuilds each pipeline from its JSON spec."""
    for spec, _ in specs:
        SHAPES.add(cp.shape(spec))
    cp.assert_restores_in_child(specs, timeout=120)
