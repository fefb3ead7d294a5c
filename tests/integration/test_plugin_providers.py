"""Every first-party plugin is installed in this session and registers exactly what
``grain_core.plugins.registry.PROVIDERS`` lists for it (``tests/test_providers.py`` checks the
docs' rendering of that table, and the plugins installed in the ``tests`` session)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from grain_core.plugins import registry

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def _first_party() -> list[str]:
    return sorted(
        tomllib.loads((p / "pyproject.toml").read_text())["project"]["name"]
        for p in PLUGINS.iterdir()
        if (p / "pyproject.toml").exists()
    )


def test_every_first_party_plugin_is_listed_and_installed():
    assert _first_party() == sorted(registry.PROVIDERS), (
        "plugins/ and grain_core.plugins.registry.PROVIDERS name different distributions"
    )
    missing = [d for d in _first_party() if registry.installed_version(d) is None]
    assert not missing, f"not installed in this session (nox 'integration' installs all): {missing}"


@pytest.mark.parametrize("dist", sorted(registry.PROVIDERS))
def test_builtin_plugin_registers_what_the_table_lists(fresh_plugins, dist):
    assert registry.installed_version(dist) is not None, f"{dist} is not installed"
    provided = {
        key for key, item in fresh_plugins.provided.items() if registry.normalize(item.distribution) == dist
    }
    assert provided == {registry.registry_key(q) for q in registry.PROVIDERS[dist]}
