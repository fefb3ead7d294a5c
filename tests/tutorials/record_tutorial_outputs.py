"""Records the outputs of the tutorial scripts under google grain into ``data/grain_0_2_18_tutorials.json``.

Run by hand in a side venv with google's grain 0.2.18 and the scripts' extra packages
(tensorflow-datasets, orbax-checkpoint, array_record, pyarrow)::

    uv venv /tmp/tutorials-venv -p 3.11
    VIRTUAL_ENV=/tmp/tutorials-venv uv pip install grain==0.2.18 tensorflow-datasets==4.9.10 \\
        array_record pyarrow orbax-checkpoint "jax[cpu]"
    /tmp/tutorials-venv/bin/python tests/tutorials/record_tutorial_outputs.py [script names]

Each script runs in a fresh interpreter in its own empty working directory (it writes its own
data there). Grain's multiprocessing reads absl flags, so the flags are parsed first; nothing else
differs from running the script directly. ``tests/integration/test_grain_tutorials.py`` runs the
same scripts on grain_core (through the ``import grain`` alias) and compares; it never needs grain.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).parent
SCRIPTS = HERE / "scripts"
OUT = HERE / "data" / "grain_0_2_18_tutorials.json"

_LAUNCH = (
    "import runpy, sys\n"
    "from absl import flags\n"
    "flags.FLAGS(sys.argv[:1])\n"
    "script = sys.argv[1]\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path.insert(0, __import__('os').path.dirname(script))\n"
    "runpy.run_path(script, run_name='__main__')\n"
)


def record(name: str) -> dict:
    """Run scripts/<name>.py under this interpreter's grain and return what it recorded."""
    with tempfile.TemporaryDirectory() as work:
        results = os.path.join(work, "results.json")
        env = dict(os.environ, TUTORIAL_RESULTS=results, JAX_PLATFORMS="cpu")
        proc = subprocess.run(
            [sys.executable, "-c", _LAUNCH, str(SCRIPTS / f"{name}.py")],
            cwd=work, env=env, capture_output=True, text=True, timeout=900,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed under grain:\n{proc.stderr[-4000:]}")
        with open(results) as f:
            return json.load(f)


def main(names: list[str]) -> None:
    import grain

    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data["_comment"] = (
        f"Recorded from google grain {grain.__version__} by tests/tutorials/record_tutorial_outputs.py; "
        "do not edit by hand."
    )
    for name in names or sorted(p.stem for p in SCRIPTS.glob("*.py") if p.stem != "tutorial_io"):
        print("recording", name, flush=True)
        data[name] = record(name)
    OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
