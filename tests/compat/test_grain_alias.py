"""``import grain`` code runs unmodified on grain_core through the opt-in alias (grain_core.compat).

Each test writes a third-party-style script that says ``import grain`` (or ``import grain.python as
grain``, ``from grain.experimental import ElasticIterator``) and runs it in a fresh interpreter:
through the launcher ``python -m grain_core.compat run``, through ``GRAIN_CORE_AS_GRAIN=1`` with
the ``.pth`` line, and in-process with ``install_grain_alias()``. A package really named ``grain``
on the path stands for an installed google grain, which the alias must not hide unless asked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import grain_core
from grain_core.compat import pth

DATASET_SCRIPT = """
import json
import grain

ds = grain.MapDataset.range(12).shuffle(seed=3).map(lambda x: x * 10).batch(4)
it = iter(ds.to_iter_dataset())
out = {"batches": [b.tolist() for b in it], "module": grain.__name__,
       "same": grain.MapDataset.__module__}
print(json.dumps(out))
"""

LEGACY_SCRIPT = """
import json
import grain.python as grain

class Double(grain.MapTransform):
    def map(self, x):
        return x * 2

with grain.InMemoryDataSource(list(range(10))) as source:
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(10, shard_options=grain.NoSharding(), shuffle=False, num_epochs=1),
        operations=[Double(), grain.Batch(5)],
    )
    batches = [b.tolist() for b in loader]
print(json.dumps({"batches": batches, "INDEX": grain.INDEX, "debug": grain.config.py_debug_mode}))
"""


ELASTIC_SCRIPT = """
import json
import grain
from grain.experimental import ElasticIterator

ds = grain.MapDataset.range(40).map(lambda x: x + 1)
before = [ElasticIterator(ds, 8, grain.sharding.ShardOptions(i, 4)) for i in range(4)]
seen = []
for it in before:
    for _ in range(2):
        seen += next(it).tolist()
state = before[0].get_state()
after = [ElasticIterator(ds, 4, grain.sharding.ShardOptions(i, 2)) for i in range(2)]
for it in after:
    it.set_state(state)
    for batch in it:
        seen += batch.tolist()
print(json.dumps({"seen": sorted(seen), "state": state}))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GRAIN_CORE_AS_GRAIN"}
    env.update(extra)
    return env


def _run(args: list[str], cwd, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=180,
    )


def _script(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _json(proc: subprocess.CompletedProcess):
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _expected_dataset_batches():
    ds = grain_core.MapDataset.range(12).shuffle(seed=3).map(lambda x: x * 10).batch(4)
    return [b.tolist() for b in ds.to_iter_dataset()]


def test_launcher_runs_an_import_grain_script(tmp_path):
    script = _script(tmp_path, "train.py", DATASET_SCRIPT)
    out = _json(_run(["-m", "grain_core.compat", "run", str(script)], tmp_path))
    assert out["module"] == "grain_core"
    assert out["same"].startswith("grain_core.")
    assert out["batches"] == _expected_dataset_batches()


def test_launcher_runs_a_module_with_legacy_grain_python(tmp_path):
    _script(tmp_path, "legacy_pipeline.py", LEGACY_SCRIPT)
    env = _env(PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    out = _json(_run(["-m", "grain_core.compat", "run", "-m", "legacy_pipeline"], tmp_path, env))
    assert out == {
        "batches": [[0, 2, 4, 6, 8], [10, 12, 14, 16, 18]],
        "INDEX": "_index",
        "debug": False,
    }


def test_elastic_iterator_imported_from_grain_experimental_restores_on_fewer_shards(tmp_path):
    script = _script(tmp_path, "elastic.py", ELASTIC_SCRIPT)
    out = _json(_run(["-m", "grain_core.compat", "run", str(script)], tmp_path))
    assert out["seen"] == list(range(1, 41))
    assert out["state"]["global_next_index"] == 16


def test_environment_switch_through_the_pth_line(tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    path = pth.install_pth(site_dir)
    assert open(path).read() == pth.PTH_LINE
    script = _script(tmp_path, "train.py", DATASET_SCRIPT)
    # site.addsitedir processes the .pth exactly as interpreter start-up does for site-packages.
    boot = f"import site, runpy; site.addsitedir({str(site_dir)!r}); runpy.run_path({str(script)!r}, run_name='__main__')"
    out = _json(_run(["-c", boot], tmp_path, _env(GRAIN_CORE_AS_GRAIN="1")))
    assert out["batches"] == _expected_dataset_batches()
    # Without the variable the line imports nothing and `grain` stays unresolved.
    probe = (
        f"import site, sys; site.addsitedir({str(site_dir)!r}); "
        "print('grain_core' in sys.modules);\n"
        "try:\n    import grain\nexcept ModuleNotFoundError:\n    print('no grain')"
    )
    proc = _run(["-c", probe], tmp_path, _env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "no", "grain"]
    assert pth.uninstall_pth(site_dir) and not os.path.exists(path)


@pytest.fixture
def installed_grain(tmp_path):
    """A real package named ``grain`` on the path, standing for an installed google grain."""
    pkg = tmp_path / "fake_site" / "grain"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("WHO = 'installed grain'\n")
    return tmp_path / "fake_site"


def test_an_installed_grain_is_not_hidden_unless_asked(tmp_path, installed_grain):
    env = _env(PYTHONPATH=str(installed_grain))
    probe = textwrap.dedent(
        """
        import grain_core.compat as c
        try:
            c.install_grain_alias()
        except c.GrainAliasError as e:
            print('refused', 'replace_installed=True' in str(e), c.is_grain_alias_installed())
        import grain
        print(getattr(grain, 'WHO', grain.__name__))
        """
    )
    proc = _run(["-c", probe], tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["refused True False", "installed grain"]

    warn = "import warnings, grain_core.compat as c; warnings.simplefilter('error')\ntry:\n    c.install_from_env()\nexcept RuntimeWarning as w:\n    print('warned', 'google grain is installed' in str(w))\nimport grain; print(getattr(grain, 'WHO', grain.__name__))"
    proc = _run(
        ["-c", warn], tmp_path, _env(PYTHONPATH=str(installed_grain), GRAIN_CORE_AS_GRAIN="1")
    )
    assert proc.stdout.splitlines() == ["warned True", "installed grain"], proc.stderr

    forced = "import grain_core.compat as c; c.install_from_env()\nimport grain, grain.python; print(grain.__name__, grain.python.__name__)"
    proc = _run(
        ["-c", forced], tmp_path, _env(PYTHONPATH=str(installed_grain), GRAIN_CORE_AS_GRAIN="force")
    )
    assert proc.stdout.split() == ["grain_core", "grain_core.python"], proc.stderr

    script = _script(tmp_path, "train.py", DATASET_SCRIPT)
    proc = _run(["-m", "grain_core.compat", "run", str(script)], tmp_path, env)
    assert proc.returncode == 2 and "google grain is installed" in proc.stderr
    out = _json(
        _run(["-m", "grain_core.compat", "run", "--replace-installed", str(script)], tmp_path, env)
    )
    assert out["module"] == "grain_core"


def test_in_process_alias_and_its_limits(tmp_path):
    probe = textwrap.dedent(
        """
        import sys
        import grain_core, grain_core.compat as c
        c.install_grain_alias(); c.install_grain_alias()  # idempotent
        import grain, grain.python as legacy, grain.python.experimental as pe
        from grain.experimental import ElasticIterator, get_element_spec
        import grain.checkpoint, grain.multiprocessing, grain.constants
        print(grain is grain_core, legacy is grain_core.python, pe.ElasticIterator is ElasticIterator)
        print(grain.constants.RECORD_KEY, grain.config is grain_core.config)
        try:
            import grain._src.python.grain_pool  # a private path no public project imports
        except ModuleNotFoundError as e:
            print('private', 'grain._src' in str(e))
        c.uninstall_grain_alias()
        print(c.is_grain_alias_installed(), 'grain' in sys.modules)
        """
    )
    proc = _run(["-c", probe], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "True True True",
        "_record_key True",
        "private True",
        "False False",
    ]


def test_alias_refused_after_another_grain_was_imported(tmp_path, installed_grain):
    probe = "import grain, grain_core.compat as c\ntry:\n    c.install_grain_alias(replace_installed=True)\nexcept c.GrainAliasError as e:\n    print('already imported' in str(e), c.is_grain_alias_installed())"
    proc = _run(["-c", probe], tmp_path, _env(PYTHONPATH=str(installed_grain)))
    assert proc.stdout.split() == ["True", "False"], proc.stderr


def test_pth_commands_of_the_launcher(tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    proc = _run(["-m", "grain_core.compat", "install-pth", "--site-dir", str(site_dir)], tmp_path)
    assert proc.returncode == 0 and (site_dir / pth.PTH_NAME).read_text() == pth.PTH_LINE
    proc = _run(["-m", "grain_core.compat", "status"], tmp_path)
    assert "alias installed in this process: False" in proc.stdout
    proc = _run(["-m", "grain_core.compat", "uninstall-pth", "--site-dir", str(site_dir)], tmp_path)
    assert proc.stdout.strip() == "removed" and not (site_dir / pth.PTH_NAME).exists()
    proc = _run(["-m", "grain_core.compat", "frobnicate"], tmp_path)
    assert proc.returncode == 2 and "unknown command" in proc.stderr
