"""The plugin system: discovery through entry points, controls, provenance, errors, listing."""

import json
import subprocess
import sys
import threading
import types
import warnings

import pytest

import grain_core as grain
from grain_core import plugins
from grain_core.plugins import hookimpl, registry


def _module(name, **hooks):
    mod = types.ModuleType(name)
    for k, v in hooks.items():
        setattr(mod, k, hookimpl(v))
    return mod


def test_test_plugin_discovered_through_every_hook(fresh_plugins):
    from grain_plugin_testdummy.plugin import RepeatEachIterDataset, SquaresSource

    assert grain.sources.SquaresSource is SquaresSource
    assert grain.SquaresSource is SquaresSource
    assert grain.experimental.RepeatEachIterDataset is RepeatEachIterDataset
    assert list(grain.MapDataset.squares(4)) == [0, 1, 4, 9]
    assert "SquaresSource" in dir(grain.sources)
    assert "RepeatEachIterDataset" in dir(grain.experimental)
    assert "squares" in dir(grain.MapDataset)
    ds = grain.MapDataset.squares(5).to_iter_dataset().pipe(grain.experimental.RepeatEachIterDataset, times=2)
    assert list(ds) == [0, 0, 1, 1, 4, 4, 9, 9, 16, 16]


def test_listing_has_provenance(fresh_plugins):
    info = {p.name: p for p in plugins.list_plugins()}
    dummy = info["testdummy"]
    assert dummy.distribution == "grain-plugin-testdummy"
    assert dummy.version == "0.0.7"
    assert dummy.status == "loaded"
    assert dummy.entry_point == "grain_plugin_testdummy.plugin"
    assert set(dummy.provides) == {"SquaresSource", "RepeatEachIterDataset", "MapDataset.squares"}
    assert info["range"].provides == ["RangeDataSource", "MapDataset.range"]


def test_broken_plugin_is_a_warning_not_a_failure(fresh_plugins):
    with pytest.warns(RuntimeWarning, match="plugin 'broken' .*grain-plugin-broken.* failed to load"):
        plugins.load_plugins()
    info = {p.name: p for p in plugins.list_plugins()}
    assert info["broken"].status == "failed"
    assert "grain_plugin_broken_missing_dependency" in info["broken"].error
    assert list(grain.MapDataset.range(3)) == [0, 1, 2]


def test_strict_mode_raises(fresh_plugins, monkeypatch):
    monkeypatch.setenv(plugins.ENV_STRICT, "1")
    with pytest.raises(plugins.PluginError, match="'broken' from grain-plugin-broken 0.0.1 failed"):
        plugins.load_plugins()


def test_block_list(fresh_plugins, monkeypatch):
    monkeypatch.setenv(plugins.ENV_BLOCK, "testdummy,broken")
    info = {p.name: p for p in plugins.list_plugins()}
    assert info["testdummy"].status == "blocked"
    with pytest.raises(AttributeError, match="SquaresSource"):
        grain.sources.SquaresSource  # noqa: B018


def test_allow_list(fresh_plugins, monkeypatch):
    monkeypatch.setenv(plugins.ENV_ALLOW, "grain-plugin-range")
    info = {p.name: p for p in plugins.list_plugins()}
    assert info["range"].status == "loaded"
    assert info["testdummy"].status == "not allowed"
    assert info["broken"].status == "not allowed"


def test_missing_plugin_names_its_distribution(fresh_plugins, monkeypatch):
    monkeypatch.setenv(plugins.ENV_BLOCK, "range,broken")
    with pytest.raises(AttributeError, match="grain-plugin-range, which is installed but blocked"):
        grain.MapDataset.range(3)
    monkeypatch.setitem(registry.KNOWN_PROVIDERS, "HoloDataSource", "grain-plugin-holo")
    with pytest.raises(AttributeError, match="pip install grain-plugin-holo"):
        grain.sources.HoloDataSource  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'Nonexistent'"):
        grain.experimental.Nonexistent  # noqa: B018


def test_disable_autoload_and_explicit_registration(fresh_plugins, monkeypatch):
    monkeypatch.setenv(plugins.ENV_DISABLE_AUTOLOAD, "1")
    with pytest.raises(AttributeError):
        grain.MapDataset.range(3)

    class Ones:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return 1

    plugins.register(_module("myplug", register_sources=lambda register: register(Ones)))
    assert grain.sources.Ones is Ones
    info = {p.name: p for p in plugins.list_plugins()}
    assert info["myplug"].status == "registered" and info["myplug"].provides == ["Ones"]
    plugins.unregister("myplug")
    with pytest.raises(AttributeError):
        grain.sources.Ones  # noqa: B018


def test_two_plugins_claiming_one_name(fresh_plugins):
    class RangeDataSource:
        pass

    plugins.register(_module("impostor", register_sources=lambda register: register(RangeDataSource)))
    with pytest.raises(plugins.PluginConflictError, match="grain-plugin-range 0.1.0, impostor"):
        grain.sources.RangeDataSource  # noqa: B018


def test_invalid_registrations(fresh_plugins, monkeypatch):
    """An explicit plugin registering something invalid fails alone, named, like an installed one;
    strict mode raises."""
    monkeypatch.setenv(plugins.ENV_DISABLE_AUTOLOAD, "1")
    plugins.register(
        _module("shadow", register_dataset_factories=lambda register: register(lambda: 0, name="map"))
    )
    plugins.register(_module("noname", register_transforms=lambda register: register(object(), name="bad name")))
    plugins.register(_module("fine", register_transforms=lambda register: register(len, name="fine_fn")))
    with pytest.warns(RuntimeWarning) as caught:
        plugins.load_plugins()
    messages = " ".join(str(w.message) for w in caught)
    assert "cannot register MapDataset.map: the kernel defines it" in messages
    assert "without a valid name" in messages
    info = {p.name: p for p in plugins.list_plugins()}
    assert info["shadow"].status == info["noname"].status == "failed"
    assert grain.experimental.fine_fn is len
    monkeypatch.setenv(plugins.ENV_STRICT, "1")
    plugins.reload_plugins()
    with pytest.raises(plugins.PluginError, match="cannot register MapDataset.map: the kernel defines it"):
        plugins.load_plugins()


def test_lazy_load_once_across_threads(fresh_plugins):
    results, errors = [], []

    def worker():
        try:
            results.append(grain.sources.SquaresSource)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and len(set(map(id, results))) == 1
    names = [fresh_plugins.pm.get_name(p) for p in fresh_plugins.pm.get_plugins()]
    assert sorted(names) == sorted(set(names)) and {"range", "testdummy"} <= set(names)
    assert "broken" not in names


def test_import_does_not_load_plugins():
    code = (
        "import grain_core, grain_core.plugins.registry as r;"
        "print(r.get_registry()._loaded);"
        "grain_core.MapDataset.range(1);"
        "print(r.get_registry()._loaded)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_cli_plugins_json_and_text():
    out = subprocess.run(
        [sys.executable, "-m", "grain_core", "plugins", "--json"], capture_output=True, text=True, check=True
    )
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["testdummy"]["version"] == "0.0.7"
    assert rows["broken"]["status"] == "failed"
    text = subprocess.run(
        [sys.executable, "-m", "grain_core", "plugins"], capture_output=True, text=True, check=True
    ).stdout
    assert "grain-plugin-range 0.1.0 [loaded]" in text
    assert "provides: RangeDataSource, MapDataset.range" in text
    assert "broken: grain-plugin-broken 0.0.1 [failed]" in text


def test_console_script_lists_plugins():
    import shutil

    exe = shutil.which("grain-core") or str(
        __import__("pathlib").Path(sys.executable).with_name("grain-core")
    )
    out = subprocess.run([exe, "plugins", "--json"], capture_output=True, text=True, check=True)
    assert "grain-plugin-range" in {row["distribution"] for row in json.loads(out.stdout)}


def test_lookups_during_reloads_always_see_a_complete_discovery(fresh_plugins):
    errors, stop = [], threading.Event()

    def look():
        while not stop.is_set():
            try:
                assert grain.sources.RangeDataSource is not None
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)
                return

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threads = [threading.Thread(target=look) for _ in range(3)]
        for t in threads:
            t.start()
        for _ in range(30):
            plugins.reload_plugins()
            plugins.load_plugins()
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]


def test_a_kernel_submodule_taken_from_the_package_does_not_load_plugins():
    """``from grain_core import author`` inside a plugin's own module (before the submodule was
    imported) must import the submodule, not run plugin discovery in the middle of that plugin's
    import (which made the plugin's own entry point fail with a circular import)."""
    code = (
        "import sys, grain_core\n"
        "from grain_core.plugins import registry\n"
        "assert 'grain_core.author' not in sys.modules\n"
        "from grain_core import author\n"
        "assert author is sys.modules['grain_core.author']\n"
        "assert not registry.get_registry()._loaded, 'plugins were loaded'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
