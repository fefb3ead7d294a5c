"""Names Grain users import from ``grain.experimental``: kernel stages, runtime tools and
plugin-provided transformations (``InterleaveIterDataset``, packing, window shuffle, ...)."""

from __future__ import annotations

from grain_core.dataset.apply import apply_transformations
from grain_core.dataset.batch_ops import FlatMapIterDataset, LimitIterDataset
from grain_core.dataset.batching import batch_and_pad
from grain_core.dataset.iter_ops import WithOptionsIterDataset
from grain_core.dataset.map_ops import FlatMapMapDataset, ZipMapDataset
from grain_core.dataset.next_index import get_next_index, set_next_index
from grain_core.dataset.reshape_ops import RebatchIterDataset, RepeatIterDataset, ZipIterDataset
from grain_core.lazy import lazy_module_attrs
from grain_core.options import DatasetOptions
from grain_core.shuffle_cipher import index_shuffle
from grain_core.transforms import FlatMapTransform, MapWithIndexTransform

__all__ = [
    "DatasetOptions",
    "FlatMapIterDataset",
    "FlatMapMapDataset",
    "FlatMapTransform",
    "LimitIterDataset",
    "MapWithIndexTransform",
    "RebatchIterDataset",
    "RepeatIterDataset",
    "WithOptionsIterDataset",
    "ZipIterDataset",
    "ZipMapDataset",
    "apply_transformations",
    "batch_and_pad",
    "get_next_index",
    "index_shuffle",
    "set_next_index",
]

_KERNEL = {
    "ThreadPrefetchIterDataset": "grain_core.runtime.thread_prefetch",
    "ThreadPrefetchDatasetIterator": "grain_core.runtime.thread_prefetch",
    "MultiprocessPrefetchIterDataset": "grain_core.runtime.multiprocess",
    "device_put": "grain_core.runtime.device:device_put",
    "pick_performance_config": "grain_core.runtime.autotune:pick_performance_config",
    "PerformanceConfig": "grain_core.runtime.autotune:PerformanceConfig",
    "visualize": "grain_core.visualize:visualize",
    "assert_equal_output_after_checkpoint": "grain_core.testing:assert_equal_output_after_checkpoint",
    "ElasticIterator": "grain_core.dataset.elastic_iterator",
    "CacheIterDataset": "grain_core.dataset.cache",
    "RngPool": "grain_core.rng_pool",
    "ShapeDtypeStruct": "grain_core.element_spec",
    "ShapeDtypeStructProtocol": "grain_core.element_spec",
    "get_element_spec": "grain_core.element_spec",
    "ExecutionTrackingMode": "grain_core.options",
    "multithread_prefetch": "grain_core.runtime.multithread",
    "PackAndBatchOperation": "grain_core.pack_and_batch",
}

__getattr__, __dir__ = lazy_module_attrs(__name__, _KERNEL, ("experimental", "sources"), globals())
