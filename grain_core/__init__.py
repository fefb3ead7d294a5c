"""grain_core: lazy, deterministic, checkpointable data pipelines for JAX, extensible by plugins.

``import grain_core as grain`` gives Grain's public API: ``grain.MapDataset``, ``grain.IterDataset``,
``grain.DatasetIterator``, ``grain.ReadOptions``, ``grain.MultiprocessingOptions``,
``grain.transforms``, ``grain.sources``, ``grain.experimental``, ``grain.checkpoint``, the DataLoader
API, Grain's ``config``, ``constants``, ``multiprocessing`` and ``monitoring`` modules, the legacy
``grain.python`` namespace, and every name an installed ``grain-plugin-*`` registers.
``grain_core.compat`` makes unmodified ``import grain`` code run on grain_core (opt-in).
"""

from __future__ import annotations

# _safepath first: it records sys.path as this process started; _wiring connects the layers
# (docs/architecture.md).
from grain_core import _safepath, _wiring, experimental, sources, transforms  # noqa: F401
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.iterator import DatasetIterator
from grain_core.lazy import lazy_module_attrs
from grain_core.options import DatasetOptions, MultiprocessingOptions, ReadOptions
from grain_core.sources import RandomAccessDataSource

__version__ = "0.1.0"

__all__ = [
    "DatasetIterator",
    "DatasetOptions",
    "IterDataset",
    "MapDataset",
    "MultiprocessingOptions",
    "RandomAccessDataSource",
    "ReadOptions",
    "experimental",
    "sources",
    "transforms",
]

_KERNEL = {
    "checkpoint": "@grain_core.checkpoint",
    "sharding": "@grain_core.sharding",
    "samplers": "@grain_core.samplers",
    "testing": "@grain_core.testing",
    "plugins": "@grain_core.plugins",
    "seeds": "@grain_core.seeds",
    "state": "@grain_core.state",
    "python": "@grain_core.python",
    "constants": "@grain_core.constants",
    "monitoring": "@grain_core.monitoring",
    "multiprocessing": "@grain_core.multiprocessing",
    "config": "grain_core.global_config:config",
    "compat": "@grain_core.compat",
    "ShardOptions": "grain_core.sharding",
    "NoSharding": "grain_core.sharding",
    "ShardByJaxProcess": "grain_core.sharding",
    "IndexSampler": "grain_core.samplers",
    "SequentialSampler": "grain_core.samplers",
    "Sampler": "grain_core.samplers",
    "DataLoader": "grain_core.data_loader",
    "DataLoaderIterator": "grain_core.data_loader",
    "load": "grain_core.loading",
    "Record": "grain_core.records",
    "RecordMetadata": "grain_core.records",
    "PyGrainDatasetIterator": "grain_core.data_loader:DataLoaderIterator",
}

__getattr__, __dir__ = lazy_module_attrs(__name__, _KERNEL, ("sources",), globals())
