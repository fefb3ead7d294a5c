"""No code from the working directory: a module plus a ``*.dist-info`` advertising it as a grain_core
plugin, planted in the directory a job starts in, is never imported — by ``grain-core`` commands run
there, by helper processes grain_core starts, or by plugin discovery — unless the process itself
started with that directory on ``sys.path`` (``python -c`` does; a script or console script never
does; ``python -P`` never does). Environment variables never import a module that is not an entry
point.

Every case runs real processes in a temporary working directory holding the planted plugin, which
appends a line to a marker file when imported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dists import write_dist_info

from grain_core import plugins

GRAIN_CORE = shutil.which("grain-core") or str(Path(sys.executable).with_name("grain-core"))

_PIPELINE = """
import grain_core as grain

ds = grain.MapDataset.source(list(range(6))).map(lambda x: x * 2)
"""


@pytest.fixture
def planted(tmp_path):
    """A shared directory holding the planted plugin and a pipeline file; the marker path."""
    shared = tmp_path / "shared"
    shared.mkdir()
    marker = tmp_path / "imported.txt"
    (shared / "evilplug.py").write_text(
        "import os\n"
        f"with open({str(marker)!r}, 'a') as f:\n"
        "    f.write(f'evilplug imported in {os.getpid()}\\n')\n"
    )
    write_dist_info(shared, "grain-plugin-evil", "6.6.6", {"evil": "evilplug"})
    (shared / "pipeline.py").write_text(_PIPELINE)
    return shared, marker


def _run(args, cwd, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env.update(kw.pop("env", {}))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, **kw)


def test_the_planted_plugin_is_valid_when_the_process_starts_in_its_directory(planted):
    """Control: ``python -c`` starts with the working directory on ``sys.path`` (Python's rule), so
    discovery may see the planted plugin there — which proves the other tests' plugin would load."""
    shared, marker = planted
    out = _run([sys.executable, "-c", "import grain_core.plugins as p; p.load_plugins()"], shared)
    assert out.returncode == 0, out.stderr
    assert marker.exists()


@pytest.mark.parametrize("target", ["pipeline.py:ds", "pipeline:ds"])
def test_grain_core_inspect_does_not_import_from_the_working_directory(planted, target):
    shared, marker = planted
    out = _run([GRAIN_CORE, "inspect", target, "--json"], shared)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)  # the pipeline itself was found and inspected
    assert not marker.exists(), marker.read_text()


def test_grain_core_plugins_does_not_list_a_planted_plugin(planted):
    shared, marker = planted
    out = _run([GRAIN_CORE, "plugins", "--json"], shared)
    assert out.returncode == 0, out.stderr
    assert "evil" not in {row["name"] for row in json.loads(out.stdout)}
    assert not marker.exists()


def test_python_dash_p_is_respected(planted):
    shared, marker = planted
    out = _run([sys.executable, "-P", "-c", "import grain_core.plugins as p; p.load_plugins()"], shared)
    assert out.returncode == 0, out.stderr
    assert not marker.exists()


def test_discovery_ignores_the_working_directory_added_after_startup(planted):
    """A script (no cwd on its path) that later puts the cwd on ``sys.path`` itself still gets no
    plugin from there."""
    shared, marker = planted
    script = shared.parent / "train.py"
    script.write_text(
        "import os, sys\nimport grain_core\nsys.path.insert(0, os.getcwd())\n"
        "from grain_core import plugins\nprint(sorted(p.name for p in plugins.list_plugins()))\n"
    )
    out = _run([sys.executable, str(script)], shared)
    assert out.returncode == 0, out.stderr
    assert "evil" not in out.stdout and "range" in out.stdout
    assert not marker.exists()


def test_helper_process_does_not_get_the_working_directory(planted):
    """``grain_core.testing.check_plugin_listed`` starts ``python -m grain_core plugins`` (``-m``
    alone would put the working directory first on its path)."""
    shared, marker = planted
    script = shared.parent / "check.py"
    script.write_text(
        "from grain_core.testing.plugins import check_plugin_listed\n"
        "check_plugin_listed('range', 'grain-plugin-range', ['RangeDataSource'])\n"
    )
    out = _run([sys.executable, str(script)], shared)
    assert out.returncode == 0, out.stderr
    assert not marker.exists(), marker.read_text()


@pytest.mark.parametrize("variable", [plugins.ENV_ALLOW, plugins.ENV_BLOCK])
def test_environment_variables_never_import_a_module_that_is_not_an_entry_point(tmp_path, variable):
    """A module importable by name but not an entry point, named in the allow/block list, is not
    imported (only warned about as matching no plugin)."""
    marker = tmp_path / "imported.txt"
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "notaplugin.py").write_text(f"open({str(marker)!r}, 'a').write('imported')\n")
    code = "import grain_core.plugins as p; p.load_plugins(); import sys; print('notaplugin' in sys.modules)"
    for value in ("notaplugin", "notaplugin.something", "notaplugin:hook"):
        out = _run(
            [sys.executable, "-c", code],
            tmp_path,
            env={"PYTHONPATH": str(libdir), variable: value},
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["False"]
        assert f"{variable} names {value!r}, which is no installed plugin" in out.stderr
    assert not marker.exists()


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_mp_prefetch_helper_processes_do_not_import_from_the_working_directory(planted, start_method):
    """The forkserver and spawned workers start as ``python -c`` (the working directory on their
    path); a script started in the planted directory must not have them import from it."""
    shared, marker = planted
    script = shared.parent / "train.py"
    script.write_text(
        "import grain_core as grain\n"
        "ds = grain.MapDataset.range(12).to_iter_dataset()\n"
        "ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))\n"
        "print(sum(ds))\n"
    )
    out = _run([sys.executable, str(script)], shared, env={"GRAIN_CORE_MP_START_METHOD": start_method})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["66"]
    assert not marker.exists(), marker.read_text()
