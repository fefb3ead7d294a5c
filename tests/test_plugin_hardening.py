"""Plugin hardening: a plugin with an unknown hook, a wrong hook signature or a hook that fails half
way fails alone, named; the allow-list works with autoload disabled; misspelled control names warn;
the install hint appears only for plugins that are not installed; the listing says why.

The misbehaving plugins are real distributions (``tests/plugins/isolated/``) installed into a
temporary directory put on ``sys.path`` (see ``tests/dists.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
from dists import install

import grain_core as grain
from grain_core import plugins
from grain_core.plugins import registry


@pytest.fixture
def isolated(tmp_path, monkeypatch, fresh_plugins):
    """Installs the named isolated test plugins into a directory on ``sys.path``."""

    def add(*names: str) -> None:
        for name in names:
            install(name, tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        fresh_plugins.reload()

    return add


def _info(name):
    return {p.name: p for p in plugins.list_plugins()}[name]


def test_unknown_hook_is_an_error_naming_the_plugin_and_others_load(isolated, monkeypatch):
    isolated("grain-plugin-unknownhook")
    monkeypatch.setenv(plugins.ENV_BLOCK, "broken")
    with pytest.warns(RuntimeWarning) as caught:
        plugins.load_plugins()
    (message,) = [str(w.message) for w in caught if "unknownhook" in str(w.message)]
    assert "'unknownhook' (grain-plugin-unknownhook 0.0.3)" in message
    assert "'register_sorces', which is no grain_core hook" in message
    assert "Did you mean 'register_sources'?" in message
    info = _info("unknownhook")
    assert info.status == "failed" and info.provides == [] and "register_sorces" in info.error
    # Its valid hook did not run either: a failed plugin leaves nothing behind.
    assert "UnknownHookTransform" not in plugins.provided_names("experimental")
    assert list(grain.MapDataset.range(3)) == [0, 1, 2]
    assert _info("testdummy").status == "loaded"


def test_unknown_hook_in_strict_mode_raises_naming_the_plugin(isolated, monkeypatch):
    isolated("grain-plugin-unknownhook")
    monkeypatch.setenv(plugins.ENV_BLOCK, "broken")
    monkeypatch.setenv(plugins.ENV_STRICT, "1")
    with pytest.raises(plugins.PluginError, match=r"'unknownhook' .*'register_sorces', which is no"):
        plugins.load_plugins()


def test_wrong_signature_is_reported_with_the_plugin_name_and_others_load(isolated, monkeypatch):
    isolated("grain-plugin-badsignature")
    monkeypatch.setenv(plugins.ENV_BLOCK, "broken")
    with pytest.warns(RuntimeWarning, match=r"'badsignature' \(grain-plugin-badsignature 0.0.3\)"):
        plugins.load_plugins()
    info = _info("badsignature")
    assert info.status == "failed"
    assert "signature does not match" in info.error and "dataset_options" in info.error
    assert "register_sources(register)" in info.error  # says what the hook looks like
    assert "BadSignatureSource" not in plugins.provided_names("sources")
    assert grain.sources.SquaresSource is not None and list(grain.MapDataset.range(2)) == [0, 1]


def test_hook_failing_half_way_leaves_no_half_registration(isolated, monkeypatch):
    isolated("grain-plugin-halfbroken")
    monkeypatch.setenv(plugins.ENV_BLOCK, "broken")
    with pytest.warns(RuntimeWarning, match="halfbroken"):
        plugins.load_plugins()
    assert "half_registered_factory_xyz" not in plugins.provided_names("experimental")
    info = _info("halfbroken")
    assert info.status == "failed" and info.provides == [] and "boom" in info.error


def test_explicit_plugin_with_unknown_hook_or_bad_signature_is_refused_by_register(fresh_plugins):
    import types

    bad = types.ModuleType("explicit_bad")
    bad.register_sourcez = plugins.hookimpl(lambda register: None)
    with pytest.raises(plugins.PluginError, match=r"'explicit_bad' implements 'register_sourcez'"):
        plugins.register(bad)
    wrong = types.ModuleType("explicit_wrong")
    wrong.register_sources = plugins.hookimpl(lambda register, nope: None)
    with pytest.raises(plugins.PluginError, match=r"'explicit_wrong' has a hook implementation whose"):
        plugins.register(wrong)
    names = {p.name for p in plugins.list_plugins()}
    assert not names & {"explicit_bad", "explicit_wrong"}


def test_hookimpl_taking_fewer_arguments_is_valid(fresh_plugins):
    import types

    called = []
    mod = types.ModuleType("noargs")
    mod.register_sources = plugins.hookimpl(lambda: called.append(True))
    plugins.register(mod)
    plugins.load_plugins()
    assert called and _info("noargs").status == "registered"


def test_allow_list_works_with_autoload_disabled(fresh_plugins, monkeypatch):
    monkeypatch.setenv(plugins.ENV_DISABLE_AUTOLOAD, "1")
    monkeypatch.setenv(plugins.ENV_ALLOW, "testdummy")
    assert list(grain.MapDataset.squares(3)) == [0, 1, 4]
    info = _info("range")
    assert info.status == "autoload disabled"
    assert plugins.ENV_DISABLE_AUTOLOAD in info.reason and plugins.ENV_ALLOW in info.reason
    assert _info("testdummy").reason == f"named in {plugins.ENV_ALLOW}"


def test_allow_list_matches_distribution_names_in_any_spelling(fresh_plugins, monkeypatch):
    monkeypatch.setenv(plugins.ENV_ALLOW, "Grain_Plugin.Range")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _info("range").status == "loaded"
    assert _info("testdummy").status == "not allowed"


@pytest.mark.parametrize("variable", [plugins.ENV_ALLOW, plugins.ENV_BLOCK])
def test_misspelled_plugin_name_warns_with_did_you_mean(fresh_plugins, monkeypatch, variable):
    monkeypatch.setenv(variable, "testdumy")
    with pytest.warns(RuntimeWarning, match=rf"{variable} names 'testdumy'.*Did you mean 'testdummy'\?"):
        plugins.load_plugins()


@pytest.mark.parametrize(
    "env, status",
    [
        ({plugins.ENV_BLOCK: "range,broken"}, "blocked"),
        ({plugins.ENV_ALLOW: "testdummy"}, "not allowed"),
        ({plugins.ENV_DISABLE_AUTOLOAD: "1"}, "autoload disabled"),
    ],
)
def test_install_hint_never_appears_for_an_installed_plugin(fresh_plugins, monkeypatch, env, status):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(AttributeError) as raised:
        grain.MapDataset.range(3)
    message = str(raised.value)
    assert f"grain-plugin-range, which is installed but {status}" in message
    assert "install it" not in message and "pip install grain-plugin-range" not in message


def test_loaded_plugin_lacking_a_name_is_told_to_upgrade_not_install(fresh_plugins, monkeypatch):
    monkeypatch.setitem(registry.KNOWN_PROVIDERS, "CubesSource", "grain-plugin-testdummy")
    with pytest.raises(AttributeError) as raised:
        grain.sources.CubesSource  # noqa: B018
    message = str(raised.value)
    assert "installed (0.0.7) and loaded but does not provide it" in message
    assert "pip install -U grain-plugin-testdummy" in message


def test_not_installed_plugin_gets_the_install_hint(fresh_plugins, monkeypatch):
    monkeypatch.setitem(registry.KNOWN_PROVIDERS, "HoloDataSource", "grain-plugin-holo")
    with pytest.raises(AttributeError, match="install it: pip install grain-plugin-holo"):
        grain.sources.HoloDataSource  # noqa: B018


def test_listing_says_why_each_plugin_is_or_is_not_loaded(tmp_path):
    env = {
        **os.environ,
        plugins.ENV_BLOCK: "broken",
        plugins.ENV_ALLOW: "range,broken,unknownhook",
        "PYTHONPATH": str(tmp_path),
    }
    install("grain-plugin-unknownhook", tmp_path)
    run = [sys.executable, "-m", "grain_core", "plugins"]
    rows = {r["name"]: r for r in json.loads(
        subprocess.run([*run, "--json"], capture_output=True, text=True, check=True, env=env).stdout
    )}
    assert rows["range"]["status"] == "loaded" and rows["range"]["reason"] == f"named in {plugins.ENV_ALLOW}"
    assert rows["broken"]["status"] == "blocked" and rows["broken"]["reason"] == f"named in {plugins.ENV_BLOCK}"
    assert rows["testdummy"]["status"] == "not allowed"
    assert rows["testdummy"]["reason"].startswith(f"not named in {plugins.ENV_ALLOW}=")
    assert rows["unknownhook"]["status"] == "failed" and "register_sorces" in rows["unknownhook"]["error"]
    text = subprocess.run(run, capture_output=True, text=True, check=True, env=env).stdout
    assert f"testdummy: grain-plugin-testdummy 0.0.7 [not allowed]\n  why: not named in {plugins.ENV_ALLOW}=" in text
    assert f"broken: grain-plugin-broken 0.0.1 [blocked]\n  why: named in {plugins.ENV_BLOCK}" in text
