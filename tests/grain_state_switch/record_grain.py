"""Records google grain 0.2.18's states of ``cases.py`` into ``grain_states.json`` (run by hand
with a Python that has google grain, never by the tests)::

    /tmp/grain_ref/bin/python tests/grain_state_switch/record_grain.py
"""

from __future__ import annotations

import itertools
import json
import pathlib
import sys

import grain
import grain.python as gp

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cases  # noqa: E402  (this directory)


def main() -> None:
    from absl import flags

    flags.FLAGS(sys.argv[:1])  # Grain's multiprocessing reads absl flags
    out = {"recorded_from": f"google grain {grain.__version__}", "cases": {}}
    for name, (_, steps) in cases.CASES.items():
        it = iter(cases.make(name, grain, gp))
        for _ in itertools.islice(it, steps):
            pass
        state = it.get_state()
        if isinstance(state, bytes):
            state = json.loads(state.decode())
        after = [cases.to_json(x) for x in it]
        out["cases"][name] = {"state": state, "after": after}
        if hasattr(it, "close"):
            it.close()
    (HERE / "grain_states.json").write_text(json.dumps(out, sort_keys=True) + "\n")
    print(f"{len(out['cases'])} cases recorded")


if __name__ == "__main__":
    main()
