"""Records google grain 0.2.18's outputs of ``cases.py`` into ``grain_outputs.json``.

Run with a Python that has google grain installed (not grain_core's venv)::

    /tmp/grain_ref/bin/python tests/correct_by_default/record_grain.py
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import grain
import grain.python  # noqa: F401 - DataLoader, samplers

HERE = pathlib.Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_cbd_cases", HERE / "cases.py")
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)


def main() -> None:
    version = getattr(grain, "__version__", "?")
    out = {"recorded_from": f"google grain {version}", "cases": {}}
    for name, run in cases.CASES.items():
        out["cases"][name] = run(grain)
    (HERE / "grain_outputs.json").write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")
    print(f"{len(out['cases'])} cases recorded from grain {version}")


if __name__ == "__main__":
    main()
