"""Hook implementation registering the Ray runtime as ``mp_prefetch(..., runtime="ray")``."""

from grain_core.author import hookimpl
from grain_plugin_ray.runtime import RayRuntime


@hookimpl
def register_runtimes(register):
    register(RayRuntime, name="ray")
