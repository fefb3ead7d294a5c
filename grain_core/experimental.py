"""Names Grain users import from ``grain.experimental``: kernel stages, runtime tools and
plugin-provided transformations (``InterleaveIterDataset``, packing, window shuffle, ...)."""

from __future__ import annotations

from grain_core.dataset.iter_ops import (
    FlatMapIterDataset,
    LimitIterDataset,
    RebatchIterDataset,
    WithOptionsIterDataset,
    ZipIterDataset,
)
from grain_core.dataset.map_ops import FlatMapMapDataset, ZipMapDataset
from grain_core.lazy import lazy_module_attrs
from grain_core.options import DatasetOptions
from grain_core.transforms import FlatMapTransform, MapWithIndexTransform

__all__ = [
    "DatasetOptions",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "FlatMapTransform",
    "LimitIterDataset",
    "MapWithIndexTransform",
    "RebatchIterDataset",
    "WithOptionsIterDataset",
    "ZipIterDataset",
    "ZipMapDataset",
]

_KERNEL = {
    "ThreadPrefetchIterDataset": "grain_core.runtime.thread_prefetch",
    "MultiprocessPrefetchIterDataset": "grain_core.runtime.multiprocess",
    "device_put": "grain_core.runtime.device:device_put",
    "pick_performance_config": "grain_core.runtime.autotune:pick_performance_config",
    "PerformanceConfig": "grain_core.runtime.autotune:PerformanceConfig",
    "visualize": "grain_core.visualize:visualize",
    "assert_equal_output_after_checkpoint": "grain_core.testing:assert_equal_output_after_checkpoint",
}

__getattr__, __dir__ = lazy_module_attrs(__name__, _KERNEL, ("experimental", "sources"), globals())
