"""grain_core plugin running ``mp_prefetch`` worker shares in Ray Core actors (see docs/ray.md)."""

from grain_plugin_ray.dataset import RayPrefetchIterDataset, ray_prefetch
from grain_plugin_ray.iterator import RayPrefetchDatasetIterator, RayWorkerError
from grain_plugin_ray.runtime import RayRuntime

__all__ = [
    "RayPrefetchDatasetIterator",
    "RayPrefetchIterDataset",
    "RayRuntime",
    "RayWorkerError",
    "ray_prefetch",
]
