"""The kernel's built-in plugin: the runtimes grain_core itself provides.

The ``"processes"`` runtime (:class:`~grain_core.runtime.processes.ProcessRuntime`) is registered
here through the ``register_runtimes`` hook, exactly as a third-party plugin registers its own (the
Ray plugin's ``grain_plugin_ray.plugin``): ``mp_prefetch(runtime="processes")`` and the default
``runtime=None`` are found in the plugin registry like any other name. ``grain_core._wiring``
registers this module as a *built-in* plugin when ``grain_core`` is imported
(:meth:`grain_core.plugins.registry.Registry.add_builtin`): it is loaded before every installed
plugin, cannot be blocked or unregistered, and no other plugin can take a name it registers.

This module is imported at ``import grain_core``; it stays light by importing the process runtime
only when discovery runs its hook.
"""

from __future__ import annotations

from grain_core.plugins.hookspecs import RegisterFn, hookimpl

__all__ = ["PLUGIN_NAME", "register_runtimes"]

#: The name this plugin has in the registry (and in its errors).
PLUGIN_NAME = "grain_core.builtin"


@hookimpl
def register_runtimes(register: RegisterFn) -> None:
    """Registers :class:`~grain_core.runtime.processes.ProcessRuntime` as ``"processes"``."""
    from grain_core.runtime.processes import ProcessRuntime

    register(ProcessRuntime, name="processes")
