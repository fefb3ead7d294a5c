"""grain_core plugin running ``mp_prefetch`` worker shares in Ray Core actors (see docs/ray.md).

    ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=8), runtime=RayRuntime(address="auto"))
"""

from grain_plugin_ray.pool import RayChannel, RayWorkerPool
from grain_plugin_ray.runtime import ACTOR_NAMESPACE, RayRuntime

__all__ = ["ACTOR_NAMESPACE", "RayChannel", "RayRuntime", "RayWorkerPool"]
