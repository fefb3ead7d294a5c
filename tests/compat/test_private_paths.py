"""Grain's private paths under the ``import grain`` alias: the one table, its docs, its errors, and
Grain-style code that imports them, compared with google grain 0.2.18's recorded output.

The recording (``data/grain_0_2_18_private_paths.json``) is made by ``record_private_paths.py``
with grain installed; nothing here needs grain.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from grain_core.compat import private_paths
from grain_core.plugins import registry

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]
RECORDED = json.loads((HERE / "data" / "grain_0_2_18_private_paths.json").read_text())
SCRIPTS = HERE / "private_path_scripts"


def run_aliased(args: list[str], cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GRAIN_CORE_AS_GRAIN"}
    return subprocess.run(
        [sys.executable, "-m", "grain_core.compat", "run", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )


def test_every_name_exists_at_that_path_in_grain_0_2_18():
    assert RECORDED["grain_version"] == "0.2.18"
    assert set(RECORDED["names"]) == set(private_paths.PRIVATE_PATHS)
    for path, entry in private_paths.PRIVATE_PATHS.items():
        assert set(RECORDED["names"][path]) == set(entry), path
        for name, kind in RECORDED["names"][path].items():
            if (path, name) in private_paths.OLDER_GRAIN_NAMES:
                assert kind == "missing", f"{path}.{name} is in 0.2.18 after all"
            else:
                assert kind != "missing", f"{path}.{name} is not in Grain 0.2.18"


def _kind(obj) -> str:
    if isinstance(obj, type):
        return "class"
    return "function" if callable(obj) else "other"


def test_every_target_resolves_to_an_object_of_grains_kind():
    """Kernel targets resolve here; a plugin's name either resolves or says which plugin to
    install (tests/integration/test_grain_private_paths.py resolves all with every plugin)."""
    for path, entry in private_paths.PRIVATE_PATHS.items():
        for name in entry:
            try:
                obj = private_paths.resolve(path, name)
            except (ImportError, registry.PluginNameError) as e:
                assert "grain-plugin-" in str(e), (path, name, e)
                continue
            kind = RECORDED["names"][path][name]
            if kind != "missing":
                assert _kind(obj) == kind, (path, name, obj)


def test_the_migration_guide_shows_the_table():
    doc = (ROOT / "docs" / "migration.md").read_text()
    assert private_paths.markdown_table() in doc


def test_missing_plugin_names_its_distribution(monkeypatch):
    monkeypatch.setitem(
        private_paths.PRIVATE_PATHS, "grain._src.fake", {"Thing": "grain_plugin_nowhere.mod:Thing"}
    )
    with pytest.raises(ImportError, match="pip install grain-plugin-nowhere"):
        private_paths.resolve("grain._src.fake", "Thing")


def test_paths_names_and_errors_under_the_alias(tmp_path):
    probe = textwrap.dedent(
        """
        import sys
        import grain_core, grain_core.compat as c
        c.install_grain_alias()
        import grain
        import grain._src.python.dataset.transformations.zip as zip_ds
        from grain._src.python.dataset.transformations import flatmap
        from grain._src.core import tree, tree_lib
        print(zip_ds.ZipIterDataset is grain.experimental.ZipIterDataset,
              flatmap.FlatMapIterDataset is grain.experimental.FlatMapIterDataset,
              tree.map_structure is tree_lib.map_structure)
        print(sorted(n for n in dir(zip_ds) if not n.startswith("__")))
        from grain._src.core.sharding import *
        print(ShardOptions is grain.sharding.ShardOptions)
        try:
            import grain._src.python.grain_pool
        except ModuleNotFoundError as e:
            print("unmapped", "grain_core.compat.private_paths" in str(e))
        try:
            from grain._src.python.dataset.base import NotAGrainName
        except ImportError as e:
            print("name", "NotAGrainName" in str(e))
        try:
            zip_ds.NotAGrainName
        except AttributeError as e:
            print("attr", "ZipIterDataset" in str(e))
        c.uninstall_grain_alias()
        print(any(n.startswith("grain.") for n in sys.modules), hasattr(grain_core, "_src"))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "True True True",
        "['ZipIterDataset', 'ZipMapDataset']",
        "True",
        "unmapped True",
        "name True",
        "attr True",
        "False False",
    ]


def test_private_imports_script_gives_grains_output(tmp_path):
    """Each grain._src path public code imports, and custom stages reading _parent, _parents,
    _ctx and _stats, run unchanged through the alias with Grain's elements and restores."""
    proc = run_aliased([str(SCRIPTS / "private_imports.py"), str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    want = RECORDED["scripts"]["private_imports"]
    assert set(got) == set(want)
    for key in want:
        assert got[key] == want[key], key


def test_worker_processes_import_user_modules_through_the_alias(tmp_path):
    """mp_prefetch workers unpickle a user module that says ``import grain`` and imports a
    private path: under ``python -m grain_core.compat run`` they have the alias too."""
    (tmp_path / "user_stages.py").write_text(
        textwrap.dedent(
            """
            import grain
            from grain._src.python.dataset import stats as dataset_stats


            class _Twice(grain.DatasetIterator):
                def __init__(self, parent):
                    super().__init__(parent)

                @dataset_stats.record_next_duration_if_output
                def __next__(self):
                    return 2 * next(self._parent)

                def get_state(self):
                    return self._parent.get_state()

                def set_state(self, state):
                    self._parent.set_state(state)


            class Twice(grain.IterDataset):
                def __init__(self, parent):
                    super().__init__(parent)

                def __iter__(self):
                    return _Twice(self._parent.__iter__())
            """
        )
    )
    (tmp_path / "main.py").write_text(
        textwrap.dedent(
            """
            import grain
            import user_stages

            if __name__ == "__main__":
                ds = user_stages.Twice(grain.MapDataset.range(6).to_iter_dataset())
                it = iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
                print(list(it))
                it.close()
            """
        )
    )
    proc = run_aliased([str(tmp_path / "main.py")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0, 2, 4, 6, 8, 10]"


def test_custom_iterator_sees_its_worker_in_mp_context(tmp_path):
    """A Grain-style iterator defined in ``__main__`` reads ``self._ctx.mp_context``: in the main
    process 0 of 1, in each ``mp_prefetch`` worker that worker's index and the worker count, as in
    Grain (and the class, sent to the workers by value, pickles)."""
    proc = run_aliased([str(SCRIPTS / "worker_context.py"), str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == RECORDED["scripts"]["worker_context"]


def test_older_multiprocess_prefetch_name_is_what_mp_prefetch_returns():
    """axlearn checks ``isinstance(ds, MultiprocessPrefetchIterDataset)`` with the class imported
    from Grain's ``transformations.prefetch`` (where older Grain releases had it)."""
    import grain_core as grain

    path = "grain._src.python.dataset.transformations.prefetch"
    cls = private_paths.resolve(path, "MultiprocessPrefetchIterDataset")
    ds = grain.MapDataset.range(4).to_iter_dataset()
    assert isinstance(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)), cls)
    assert not isinstance(ds, cls)


def test_keras_style_loader_rebuild_gives_grains_output(tmp_path):
    """Keras's Grain adapter imports SharedMemoryArrayMetadata from Grain's private module and
    rebuilds a DataLoader from its private attributes (``_multiprocessing_options``, ...)."""
    proc = run_aliased([str(SCRIPTS / "keras_style_loader.py"), str(tmp_path)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == RECORDED["scripts"]["keras_style_loader"]
