"""The cases of tests/compat that call a first-party plugin other than range (Grain's error wording
and Grain's logging for the packers, ...): the kernel's ``tests`` session installs only the range
plugin, so they run here, where every plugin is installed, through the same checks."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "compat"))
import test_grain_error_messages as errors  # noqa: E402
import test_grain_logging as logs  # noqa: E402


def test_there_are_plugin_cases():
    assert errors.PLUGIN_CASES and logs.PLUGIN_LOGGED


@pytest.mark.parametrize("case", errors.PLUGIN_CASES, ids=errors.case_id)
def test_plugin_error_matches_grains(case):
    errors.check_error(case)


@pytest.mark.parametrize(
    ("call", "level", "pattern"), logs.PLUGIN_LOGGED, ids=[c[0].__name__ for c in logs.PLUGIN_LOGGED]
)
def test_plugin_logs_are_logged_not_warned(caplog, call, level, pattern):
    logs.check_logged(caplog, call, level, pattern)
