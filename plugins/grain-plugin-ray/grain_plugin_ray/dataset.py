"""``RayPrefetchIterDataset``: a pipeline whose ``mp_prefetch`` worker shares run in Ray actors."""

from __future__ import annotations

from collections.abc import Callable

from grain_core.dataset import DatasetIterator, IterDataset
from grain_core.options import MultiprocessingOptions
from grain_core.runtime.multiprocess import default_multiprocessing_options
from grain_plugin_ray.iterator import RayPrefetchDatasetIterator
from grain_plugin_ray.runtime import RayRuntime

__all__ = ["RayPrefetchIterDataset", "ray_prefetch"]


class RayPrefetchIterDataset(IterDataset):
    """``parent`` produced by ``options.num_workers`` Ray actors (``num_workers=0``: in process).

    Same elements, order and state format as ``parent.mp_prefetch(options)``.
    """

    def __init__(
        self,
        parent: IterDataset,
        multiprocessing_options: MultiprocessingOptions | None = None,
        runtime: RayRuntime | None = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
    ):
        if not isinstance(parent, IterDataset):
            raise TypeError(
                f"The Ray runtime needs an IterDataset parent, got {type(parent).__name__}. "
                "Call .to_iter_dataset() on a MapDataset first."
            )
        if multiprocessing_options is None:
            multiprocessing_options = default_multiprocessing_options()
        if not isinstance(multiprocessing_options, MultiprocessingOptions):
            raise TypeError(
                "multiprocessing_options must be a MultiprocessingOptions, got "
                f"{type(multiprocessing_options).__name__}."
            )
        if runtime is None:
            runtime = RayRuntime()
        if not isinstance(runtime, RayRuntime):
            raise TypeError(f"runtime must be a RayRuntime, got {type(runtime).__name__}.")
        super().__init__(parent)
        self.multiprocessing_options = multiprocessing_options
        self.runtime = runtime
        self.worker_init_fn = worker_init_fn

    def __iter__(self) -> DatasetIterator:
        (parent,) = self.parents
        if self.multiprocessing_options.num_workers == 0:
            return iter(parent)
        return RayPrefetchDatasetIterator(
            parent, self.multiprocessing_options, self.worker_init_fn, self.runtime
        )


def ray_prefetch(
    ds: IterDataset,
    options: MultiprocessingOptions | None = None,
    runtime: RayRuntime | None = None,
    worker_init_fn: Callable[[int, int], None] | None = None,
) -> RayPrefetchIterDataset:
    """``ds.mp_prefetch(options, worker_init_fn)`` with the worker shares in Ray actors
    (``ds.ray_prefetch(...)`` once the plugin is loaded)."""
    return RayPrefetchIterDataset(ds, options, runtime, worker_init_fn)
