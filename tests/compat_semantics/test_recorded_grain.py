"""grain_core gives the outputs google grain 0.2.18 gave for the same code (recorded in ``data/``).

Every case in ``data/*.json`` is Python source recorded with ``record_grain.py`` under the real
Grain; here it runs with ``grain = grain_core``. Outputs must be equal; a case where Grain raised
must raise the same exception type here (and, for the messages users match on, the same text).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest

import grain_core

HERE = pathlib.Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_compat_cases", HERE / "cases.py")
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

# Messages Grain users match on: the recorded text must be in ours.
_SAME_MESSAGE = ("Seed must be an integer", "rounds must be", "index must be in", "non-zero proportions")


def _load() -> list:
    out = []
    for path in sorted((HERE / "data").glob("*.json")):
        payload = json.loads(path.read_text())
        assert payload["recorded_from"].startswith("google grain 0.2.18")
        for i, case in enumerate(payload["cases"]):
            out.append(pytest.param(case, id=f"{path.stem}-{i}"))
    return out


@pytest.mark.parametrize("case", _load())
def test_same_output_as_grain(case):
    code = case["code"]
    if "error" in case:
        with pytest.raises(Exception) as info:  # noqa: PT011 - compared to Grain's type below
            cases.run_case(code, grain_core, np)
        assert type(info.value).__name__ == case["error"], (code, info.value)
        if any(m in case["message"] for m in _SAME_MESSAGE):
            assert case["message"] in str(info.value)
        return
    assert cases.run_case(code, grain_core, np) == case["output"], code
