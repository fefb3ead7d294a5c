"""Records google grain 0.2.18's TFRecordIterDataset states on ``varied_sizes.tfrecord``.

Run manually in a side venv with google's grain installed (not needed by the tests)::

    /tmp/grainvenv/bin/python plugins/grain-plugin-tfrecord/tests/data/record_grain_states.py
"""

from __future__ import annotations

import json
import pathlib

import grain

HERE = pathlib.Path(__file__).parent


def main() -> None:
    it = iter(grain.experimental.TFRecordIterDataset(str(HERE / "varied_sizes.tfrecord")))
    states = [it.get_state()]
    for _ in it:
        states.append(it.get_state())
    out = {
        "_comment": f"Recorded from google grain {grain.__version__}: get_state() of "
        "TFRecordIterDataset('varied_sizes.tfrecord') before the first record and after each one.",
        "states": states,
    }
    (HERE / "grain_states.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
