"""grain_core's plugin system: pluggy hooks found through ``grain_core`` entry points.

Public API:

* :data:`hookimpl` — decorate hook implementations with it (hooks: :mod:`grain_core.plugins.hookspecs`).
* :func:`register` / :func:`unregister` — add or remove a plugin module/object by hand (tests,
  frozen apps, notebooks); takes effect on the next lookup.
* :func:`list_plugins` — every plugin discovery saw, with distribution, version, status, what it
  provides and load errors.
* :func:`load_plugins` — run discovery now (it otherwise runs on the first plugin-name lookup).
* Errors: :class:`PluginError`, :class:`PluginConflictError`, :class:`PluginNameError`.

See ``docs/plugins.md`` for the environment controls and how to write a plugin.
"""

from __future__ import annotations

from typing import Any

from grain_core.plugins.hookspecs import hookimpl, hookspec
from grain_core.plugins.registry import (
    ENTRY_POINT_GROUP,
    ENV_ALLOW,
    ENV_BLOCK,
    ENV_DISABLE_AUTOLOAD,
    ENV_STRICT,
    PluginConflictError,
    PluginError,
    PluginInfo,
    PluginNameError,
    get_registry,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "ENV_ALLOW",
    "ENV_BLOCK",
    "ENV_DISABLE_AUTOLOAD",
    "ENV_STRICT",
    "PluginConflictError",
    "PluginError",
    "PluginInfo",
    "PluginNameError",
    "hookimpl",
    "hookspec",
    "list_plugins",
    "load_plugins",
    "provided_names",
    "register",
    "reload_plugins",
    "unregister",
]


def register(plugin: Any, name: str | None = None) -> None:
    """Registers ``plugin`` (a module or object with ``@hookimpl`` functions) in this process."""
    get_registry().register(plugin, name)


def unregister(name: str) -> None:
    """Removes a plugin added with :func:`register`."""
    get_registry().unregister(name)


def reload_plugins() -> None:
    """Forgets discovery results; the next lookup re-reads entry points and the environment."""
    get_registry().reload()


def load_plugins() -> list[PluginInfo]:
    """Runs discovery (once) and returns :func:`list_plugins`."""
    get_registry().ensure_loaded()
    return list_plugins()


def list_plugins() -> list[PluginInfo]:
    """Every plugin discovery saw, loaded or not, sorted by name."""
    reg = get_registry()
    reg.ensure_loaded()
    return sorted(reg.plugins.values(), key=lambda p: p.name)


def provided_names(namespace: str) -> list[str]:
    """Names plugins provide in ``namespace``: ``"sources"`` or ``"experimental"``."""
    from grain_core.plugins.registry import names

    return names(namespace)
