"""Hook implementations registering the Ray runtime."""

from grain_core.plugins import hookimpl
from grain_plugin_ray.dataset import ray_prefetch


@hookimpl
def register_dataset_factories(register):
    register(ray_prefetch, name="ray_prefetch", on="IterDataset")
