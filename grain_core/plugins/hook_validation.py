"""Hook validation: a plugin is registered only when every hook implementation it has matches a hook
grain_core declares (:mod:`grain_core.plugins.hookspecs`), by pluggy's own signature check plus a
check for implementations of undeclared hooks."""

from __future__ import annotations

import inspect
from typing import Any

import pluggy

from grain_core.plugins import hookspecs
from grain_core.plugins.info import PluginError, PluginInfo
from grain_core.suggest import did_you_mean


def validate_plugin(pm: pluggy.PluginManager, plugin: Any, info: PluginInfo) -> None:
    """Registers ``plugin`` in ``pm`` if its hook implementations match grain_core's hooks; else
    raises :class:`PluginError` naming the plugin, with ``pm`` unchanged."""
    name = info.name if pm.get_plugin(info.name) is None else None
    try:
        registered_as = pm.register(plugin, name=name)
    except pluggy.PluginValidationError as e:
        if pm.is_registered(plugin):
            pm.unregister(plugin)
        raise PluginError(
            f"grain_core plugin {info.label} has a hook implementation whose signature does not "
            f"match the hook: {' '.join(str(e).split())}. grain_core's hooks: {_hook_list()}."
        ) from None
    hooks = hook_signatures()
    unknown = sorted(
        caller.name
        for caller in pm.get_hookcallers(plugin) or []
        if not caller.has_spec()
        and any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls())
    )
    if unknown:
        pm.unregister(plugin, registered_as)
        hints = "".join(did_you_mean(u, hooks) for u in unknown)
        raise PluginError(
            f"grain_core plugin {info.label} implements {', '.join(map(repr, unknown))}, which is "
            f"no grain_core hook.{hints} grain_core's hooks: {_hook_list()}."
        )


def _hook_list() -> str:
    return ", ".join(f"{name}{sig}" for name, sig in sorted(hook_signatures().items()))


def hook_signatures() -> dict[str, str]:
    """Every hook grain_core declares, with its signature: ``{"register_sources": "(register)"}``."""
    return {
        name: f"({', '.join(inspect.signature(fn).parameters)})"
        for name, fn in vars(hookspecs).items()
        if callable(fn) and hasattr(fn, f"{hookspecs.PROJECT_NAME}_spec")
    }
