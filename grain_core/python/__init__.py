"""``grain.python``: Grain's legacy namespace (``import grain_core.python as grain``).

It holds the names Grain 0.2.x exports from ``grain.python`` -- the DataLoader API, the legacy
transformation names (``MapTransform``, ``RandomMapTransform``, ``FilterTransform``, ...), the
legacy ``Operation`` classes, ``InMemoryDataSource``, ``SharedMemoryArray``, the Orbax checkpoint
classes under their ``PyGrain*`` names, the record-key constants and ``config`` -- plus, as a
fallback, every name of the ``grain_core`` top level. Names resolve on first use, so importing
this module imports nothing heavy (Orbax only when a ``PyGrainCheckpoint*`` name is used).
"""

from __future__ import annotations

import importlib
from typing import Any

import grain_core as _top
from grain_core.constants import (
    DATASET_INDEX,
    EPOCH,
    INDEX,
    META_FEATURES,
    RECORD,
    RECORD_KEY,
    SEED,
)
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.iterator import DatasetIterator
from grain_core.operations import (
    BatchOperation,
    FilterOperation,
    MapOperation,
    Operation,
    RandomMapOperation,
)
from grain_core.options import MultiprocessingOptions, ReadOptions
from grain_core.python import experimental
from grain_core.records import Record, RecordMetadata
from grain_core.sharding import NoSharding, ShardByJaxProcess, ShardOptions
from grain_core.sources import RandomAccessDataSource
from grain_core.transforms import (
    Batch,
    DatasetSelectionMap,
    FilterTransform,
    MapTransform,
    MapWithIndexTransform,
    RandomMapTransform,
    Transformation,
    Transformations,
)

__all__ = [
    "DATASET_INDEX",
    "EPOCH",
    "INDEX",
    "META_FEATURES",
    "RECORD",
    "RECORD_KEY",
    "SEED",
    "Batch",
    "BatchOperation",
    "DatasetIterator",
    "DatasetSelectionMap",
    "FilterOperation",
    "FilterTransform",
    "IterDataset",
    "MapDataset",
    "MapOperation",
    "MapTransform",
    "MapWithIndexTransform",
    "MultiprocessingOptions",
    "NoSharding",
    "Operation",
    "RandomAccessDataSource",
    "RandomMapOperation",
    "RandomMapTransform",
    "ReadOptions",
    "Record",
    "RecordMetadata",
    "ShardByJaxProcess",
    "ShardOptions",
    "Transformation",
    "Transformations",
    "experimental",
]

# Legacy names resolved on first use: ``"module:attr"``.
_LAZY = {
    "config": "grain_core.global_config:config",
    "DataLoader": "grain_core.data_loader:DataLoader",
    "PyGrainDatasetIterator": "grain_core.data_loader:DataLoaderIterator",
    "IndexSampler": "grain_core.samplers:IndexSampler",
    "Sampler": "grain_core.samplers:Sampler",
    "SequentialSampler": "grain_core.samplers:SequentialSampler",
    "load": "grain_core.loading:load",
    "InMemoryDataSource": "grain_core.memory_source:SharedMemoryDataSource",
    "SharedMemoryArray": "grain_core.multiprocessing:SharedMemoryArray",
    "PyGrainCheckpointHandler": "grain_core.checkpoint:CheckpointHandler",
    "PyGrainCheckpointSave": "grain_core.checkpoint:CheckpointSave",
    "PyGrainCheckpointRestore": "grain_core.checkpoint:CheckpointRestore",
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is not None:
        module, _, attr = target.partition(":")
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        return getattr(_top, name)
    except AttributeError:
        raise AttributeError(f"module 'grain_core.python' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(dir(_top)))
