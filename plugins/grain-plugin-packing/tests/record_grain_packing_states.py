"""Records, from google grain 0.2.18, the packers' iterator states after every row and the rows
that follow, into ``data/grain_0_2_18_packing_states.json`` (run it with a Python that has google's
``grain``: ``/path/to/grain-venv/bin/python record_grain_packing_states.py``)."""

from __future__ import annotations

import json
import pathlib

import grain
from grain_packing_cases import CASES, build, plain

OUT = pathlib.Path(__file__).parent / "data" / "grain_0_2_18_packing_states.json"


def main() -> None:
    recorded = {"_about": "recorded from google grain 0.2.18 by record_grain_packing_states.py"}
    for case in CASES:
        it = iter(build(grain, case))
        rows, states = [], [it.get_state()]
        for row in it:
            rows.append(plain(row))
            states.append(it.get_state())
        # Grain's own restore of each state gives the rows after it.
        for k, state in enumerate(states):
            again = iter(build(grain, case))
            again.set_state(state)
            assert [plain(r) for r in again] == rows[k:], (case, k)
        recorded[case] = {"rows": rows, "states": states}
    OUT.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
