"""Errors users match on carry Grain's wording (issue 12): for each ``(call, Grain's regex)`` of
``error_cases.py`` (ported from Grain's unit tests), grain_core raises an exception of the type
Grain raised (``isinstance``: ours may be a subclass, e.g. ``StateOutOfRangeError`` is a
``StateMismatchError`` and an ``IndexError``) whose message matches the regex. Grain's type and
message are recorded from google grain 0.2.18 in ``data/grain_0_2_18_errors.json``."""

from __future__ import annotations

import builtins
import json
import pathlib
import re

import numpy as np
import pytest

import grain_core
from grain_core.plugins.registry import KNOWN_PROVIDERS

HERE = pathlib.Path(__file__).resolve().parent
RECORDED = json.loads((HERE / "data" / "grain_0_2_18_errors.json").read_text())
_PLUGIN_NAMES = [n for n, dist in KNOWN_PROVIDERS.items() if dist != "grain-plugin-range"]


def needs_plugin(case: dict) -> bool:
    """A case calling a name a first-party plugin other than range provides: the kernel's
    ``tests`` session lacks those plugins, so tests/integration/test_compat_plugin_cases.py runs it."""
    return any(re.search(rf"\b{name}\b", case["code"]) for name in _PLUGIN_NAMES)


KERNEL_CASES = [c for c in RECORDED["cases"] if not needs_plugin(c)]
PLUGIN_CASES = [c for c in RECORDED["cases"] if needs_plugin(c)]


def test_the_table_is_what_was_recorded():
    import sys

    sys.path.insert(0, str(HERE))
    try:
        from error_cases import ERROR_CASES
    finally:
        sys.path.remove(str(HERE))
    assert RECORDED["recorded_from"].startswith("google grain 0.2.18")
    assert [(c["code"], c["regex"]) for c in RECORDED["cases"]] == ERROR_CASES


def case_id(case: dict) -> str:
    return case["code"].splitlines()[-1][:70]


@pytest.mark.parametrize("case", KERNEL_CASES, ids=case_id)
def test_error_matches_grains(case):
    check_error(case)


def check_error(case: dict) -> None:
    """grain_core raises Grain's exception type with a message Grain's regex matches."""
    assert re.search(case["regex"], case["message"]), "the regex must match Grain's own message"
    grain_type = getattr(builtins, case["error"])
    with pytest.raises(grain_type) as info:
        exec(case["code"], {"grain": grain_core, "np": np})  # noqa: S102 - recorded fixed source
    assert re.search(case["regex"], str(info.value)), (case["regex"], str(info.value))
