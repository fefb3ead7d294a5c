"""Records what google grain 0.2.18 has at the private paths of grain_core's table, and what the
scripts in ``private_path_scripts/`` print under it, into ``data/grain_0_2_18_private_paths.json``.

Run by hand in a side venv with google grain 0.2.18 installed (the tests never need grain)::

    /tmp/grain_ref/bin/python tests/compat/record_private_paths.py

For every path and name of ``grain_core/compat/private_paths.py`` (read as a file; grain_core is
not imported) it records the kind of Grain's object (``class``, ``function``, ``other``) or
``missing``. Then it runs each script in a fresh temporary directory and keeps its JSON output.
``test_private_paths.py`` and ``tests/integration/test_grain_private_paths.py`` compare.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]
OUT = HERE / "data" / "grain_0_2_18_private_paths.json"
SCRIPTS = HERE / "private_path_scripts"


def _table():
    spec = importlib.util.spec_from_file_location(
        "private_paths_table", ROOT / "grain_core" / "compat" / "private_paths.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PRIVATE_PATHS


def kind(obj) -> str:
    if inspect.isclass(obj):
        return "class"
    if callable(obj):
        return "function"
    return "other"


def main() -> None:
    import grain

    names: dict[str, dict[str, str]] = {}
    for path, entry in sorted(_table().items()):
        try:
            module = importlib.import_module(path)
        except ImportError:
            names[path] = {n: "missing" for n in sorted(entry)}
            continue
        names[path] = {
            n: kind(getattr(module, n)) if hasattr(module, n) else "missing" for n in sorted(entry)
        }
    outputs = {}
    for script in sorted(SCRIPTS.glob("*.py")):
        with tempfile.TemporaryDirectory() as d:
            proc = subprocess.run(
                [sys.executable, str(script), d],
                capture_output=True, text=True, check=True, timeout=600, cwd=d,
            )
        outputs[script.stem] = json.loads(proc.stdout)
    OUT.write_text(
        json.dumps(
            {"grain_version": grain.__version__, "names": names, "scripts": outputs},
            indent=1, sort_keys=True,
        )
        + "\n"
    )
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
