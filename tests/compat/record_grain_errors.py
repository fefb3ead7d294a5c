"""Records google grain 0.2.18's error for each case of ``error_cases.py`` into
``data/grain_0_2_18_errors.json`` (never run by the test suite, which must not need Grain):

    /tmp/grainvenv/bin/python tests/compat/record_grain_errors.py

It checks that each regex matches the message Grain raised (so the table is Grain's).
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from error_cases import ERROR_CASES  # noqa: E402


def main() -> None:
    import grain  # the real google grain
    from absl import flags

    flags.FLAGS(sys.argv[:1])  # Grain's workers read absl flags; parse none
    from importlib.metadata import version

    recorded = []
    for code, regex in ERROR_CASES:
        try:
            exec(code, {"grain": grain, "np": np})  # noqa: S102 - the table's own fixed source
        except Exception as e:  # noqa: BLE001 - the error is what we record
            message = str(e)
            if not re.search(regex, message):
                raise SystemExit(f"regex {regex!r} does not match Grain's message {message!r}") from None
            recorded.append(
                {"code": code, "regex": regex, "error": type(e).__name__, "message": message}
            )
            continue
        raise SystemExit(f"Grain raised nothing for {code!r}")
    payload = {
        "recorded_from": f"google grain {version('grain')} (pip package 'grain')",
        "recorder": "tests/compat/record_grain_errors.py",
        "cases": recorded,
    }
    (HERE / "data" / "grain_0_2_18_errors.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(f"{len(recorded)} cases")


if __name__ == "__main__":
    main()
