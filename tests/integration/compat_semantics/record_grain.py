"""Records google grain 0.2.18's outputs for the pipelines in ``cases.py`` into ``data/*.json``.

Run it with Grain installed (never by the test suite, which must not need Grain):

    /tmp/grainvenv/bin/python tests/integration/compat_semantics/record_grain.py [GROUP ...]

(with group names, only those groups' files are rewritten).

Each case is a Python expression over a module named ``grain`` (plus ``np``); the recorded file
holds the expression and what Grain produced, so ``test_recorded_grain.py`` evaluates the same
expression with ``grain = grain_core`` and compares.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases  # noqa: E402


def main() -> None:
    import grain  # the real google grain

    try:  # Grain's worker processes read absl flags; parse none of them
        from absl import flags

        flags.FLAGS(sys.argv[:1])
    except ImportError:
        pass

    version = getattr(grain, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("grain")
    out_dir = HERE / "data"
    out_dir.mkdir(exist_ok=True)
    wanted = sys.argv[1:] or list(cases.GROUPS)
    for group, entries in cases.GROUPS.items():
        if group not in wanted:
            continue
        recorded = []
        for code in entries:
            try:
                result = {"output": cases.run_case(code, grain, np)}
            except Exception as e:  # noqa: BLE001 - the error itself is what we record
                result = {"error": type(e).__name__, "message": str(e)}
            recorded.append({"code": code, **result})
        payload = {
            "recorded_from": f"google grain {version} (pip package 'grain')",
            "recorder": "tests/integration/compat_semantics/record_grain.py",
            "cases": recorded,
        }
        (out_dir / f"{group}.json").write_text(json.dumps(payload, indent=1) + "\n")
        print(f"{group}: {len(recorded)} cases")


if __name__ == "__main__":
    main()
