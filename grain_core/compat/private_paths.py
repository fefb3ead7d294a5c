"""The one table of Grain's private module paths (``grain._src...``) that public code imports.

Under the ``import grain`` alias (:mod:`grain_core.compat.alias`), ``grain._src.X`` resolves only
through :data:`PRIVATE_PATHS`: each Grain module path maps each Grain name that public projects
import from it to the grain_core object with Grain's contract (``"module:attribute"``, the attribute
possibly dotted). Contract:

* ``import grain._src.a.b as m``, ``from grain._src.a import b`` and ``from grain._src.a.b import
  Name`` work for every path of the table; the packages above a path (``grain._src``,
  ``grain._src.a``) are importable too, but hold only their table submodules.
* A module of the table is a plain module object named by Grain's path whose attributes resolve on
  first use (a plugin's class needs only that plugin installed when it is used). A name the table
  lacks raises ``AttributeError`` listing the names it has; a plugin that is not installed raises
  ``ImportError`` naming the ``grain-plugin-*`` distribution to install.
* A ``grain._src`` path that is not in the table, nor a package above one, raises the
  ``ModuleNotFoundError`` the alias raises for every module grain_core lacks.

Where Grain's class has private attributes that subclasses use, the object mapped to keeps them
(``_TFRecordReader._reader``, ``TFRecordIterDataset._path``, ``_parent``, ``_ctx``, ``_stats``:
see :mod:`grain_core.dataset.grain_attrs` and :mod:`grain_plugin_tfrecord.grain_private`).
``docs/migration.md`` shows this table; ``tests/compat/test_private_paths.py`` checks that the two
agree, that every target resolves and that each name exists at that path in Grain 0.2.18.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = [
    "OLDER_GRAIN_NAMES",
    "OLDER_GRAIN_PATHS",
    "PRIVATE_PATHS",
    "PRIVATE_ROOT",
    "installed_modules",
    "is_private_package",
    "is_private_path",
    "make_module",
    "markdown_table",
    "resolve",
]

PRIVATE_ROOT = "grain._src"

def _tr(name: str) -> str:
    return "grain._src.python.dataset.transformations." + name


_DS = "grain_core.dataset.base:"
_EXP = "grain_core.experimental:"
_ATTRS = "grain_core.dataset.grain_attrs:"
_KERNEL = "grain_core.dataset.base:builders."  # the kernel's stage classes, by their kind
_PRIV = "grain_core.compat.grain_private:"

#: Grain module path -> {Grain name: "grain_core module:attribute"}.
PRIVATE_PATHS: dict[str, dict[str, str]] = {
    "grain._src.core.constants": {
        n: f"grain_core.constants:{n}"
        for n in ("INDEX", "RECORD_KEY", "DATASET_INDEX", "EPOCH", "SEED", "RECORD", "META_FEATURES")
    },
    "grain._src.core.config": {"config": "grain_core.global_config:config"},
    "grain._src.core.sharding": {
        "ShardOptions": "grain_core.sharding:ShardOptions",
        "NoSharding": "grain_core.sharding:NoSharding",
        "ShardByJaxProcess": "grain_core.sharding:ShardByJaxProcess",
        "even_split": _PRIV + "even_split",
    },
    "grain._src.core.transforms": {
        n: f"grain_core.transforms:{n}"
        for n in ("Map", "RandomMap", "MapWithIndex", "TfRandomMap", "Filter", "FlatMap", "Batch")
    },
    "grain._src.core.tree_lib": {
        n: f"grain_core.tree:{n}"
        for n in (
            "map_structure",
            "map_structure_with_path",
            "assert_same_structure",
            "flatten",
            "flatten_with_path",
            "unflatten_as",
            "spec_like",
        )
    }
    | {"map_structure_up_to": _PRIV + "map_structure_up_to"},
    "grain._src.python.options": {
        "ReadOptions": "grain_core.options:ReadOptions",
        "MultiprocessingOptions": "grain_core.options:MultiprocessingOptions",
    },
    "grain._src.python.data_sources": {
        "RandomAccessDataSource": "grain_core.sources:RandomAccessDataSource",
        "ArrayRecordDataSource": "grain_core.sources:ArrayRecordDataSource",
        "RangeDataSource": "grain_core.sources:RangeDataSource",
        "SharedMemoryDataSource": "grain_core.sources:SharedMemoryDataSource",
        "SupportsIndex": "grain_core.sources:SupportsIndex",
    },
    "grain._src.python.record": {
        "Record": "grain_core.records:Record",
        "RecordMetadata": "grain_core.records:RecordMetadata",
    },
    "grain._src.python.samplers": {
        "Sampler": "grain_core.samplers:Sampler",
        "SequentialSampler": "grain_core.samplers:SequentialSampler",
        "IndexSampler": "grain_core.samplers:IndexSampler",
    },
    "grain._src.python.operations": {
        n: f"grain_core.operations:{n}"
        for n in ("MapOperation", "RandomMapOperation", "FilterOperation", "BatchOperation")
    },
    "grain._src.python.data_loader": {
        "DataLoader": "grain_core.data_loader:DataLoader",
        "DataLoaderIterator": "grain_core.data_loader:DataLoaderIterator",
    },
    "grain._src.python.load": {"load": "grain_core.loading:load"},
    "grain._src.python.checkpoint.handler": {
        # Orbax's checkpoint metadata names Grain's handler by this path.
        "CheckpointHandler": "grain_core.checkpoint:CheckpointHandler",
    },
    "grain._src.python.ipc.shared_memory_array": {
        "SharedMemoryArray": "grain_core.multiprocessing:SharedMemoryArray",
        "SharedMemoryArrayMetadata": "grain_core.multiprocessing:SharedMemoryArrayMetadata",
    },
    "grain._src.python.testing.experimental": {
        "assert_equal_output_after_checkpoint": "grain_core.testing:assert_equal_output_after_checkpoint",
    },
    "grain._src.python.experimental.example_packing.packing": {
        "PackAndBatchOperation": _EXP + "PackAndBatchOperation",
    },
    "grain._src.python.experimental.index_shuffle.python.index_shuffle_module": {
        "index_shuffle": "grain_core.shuffle_cipher:index_shuffle",
    },
    "grain._src.python.dataset.base": {
        "RandomAccessDataSource": "grain_core.sources:RandomAccessDataSource",
        "DatasetSelectionMap": "grain_core.transforms:DatasetSelectionMap",
        "DatasetOptions": "grain_core.options:DatasetOptions",
        "ExecutionTrackingMode": "grain_core.options:ExecutionTrackingMode",
        "ShapeDtypeStruct": "grain_core.element_spec:ShapeDtypeStruct",
        "ShapeDtypeStructProtocol": "grain_core.element_spec:ShapeDtypeStructProtocol",
        "IteratorContext": _ATTRS + "IteratorContext",
        "MultiprocessingContext": _ATTRS + "MultiprocessingContext",
    },
    "grain._src.python.dataset.dataset": {
        "MapDataset": _DS + "MapDataset",
        "IterDataset": _DS + "IterDataset",
        "DatasetIterator": "grain_core.dataset.iterator:DatasetIterator",
        "MapDatasetMeta": _DS + "MapDatasetMeta",
        "IterDatasetMeta": _DS + "IterDatasetMeta",
        "WithOptionsIterDataset": _EXP + "WithOptionsIterDataset",
        "apply_transformations": _EXP + "apply_transformations",
        "get_element_spec": _EXP + "get_element_spec",
        "get_next_index": _EXP + "get_next_index",
        "set_next_index": _EXP + "set_next_index",
        "get_execution_summary": "grain_core.compat.execution_summary:get_execution_summary",
    },
    "grain._src.python.dataset.stats": {
        "Stats": _ATTRS + "Stats",
        "Timer": _ATTRS + "Timer",
        "record_next_duration_if_output": _ATTRS + "record_next_duration_if_output",
        "HashableWeakRef": _PRIV + "HashableWeakRef",
        "pretty_format_summary": "grain_core.compat.execution_summary:pretty_format_summary",
    },
    "grain._src.python.dataset.elastic_iterator": {"ElasticIterator": _EXP + "ElasticIterator"},
    "grain._src.python.dataset.sources.tfrecord_dataset": {
        "TFRecordIterDataset": _EXP + "TFRecordIterDataset",
        "_TFRecordReader": "grain_plugin_tfrecord.grain_private:TFRecordReader",
        "_TFRecordDatasetIterator": "grain_plugin_tfrecord.grain_private:TFRecordDatasetIterator",
    },
    "grain._src.python.dataset.sources.parquet_dataset": {
        "ParquetIterDataset": _EXP + "ParquetIterDataset",
    },
    _tr("batch"): {
        "BatchMapDataset": _KERNEL + "BatchMapDataset",
        "BatchIterDataset": _KERNEL + "BatchIterDataset",
        "batch_and_pad": _EXP + "batch_and_pad",
        "make_batch": "grain_core.tree:stack",
    },
    _tr("filter"): {
        "FilterMapDataset": _KERNEL + "FilterMapDataset",
        "FilterIterDataset": _KERNEL + "FilterIterDataset",
    },
    _tr("flatmap"): {
        "FlatMapMapDataset": _EXP + "FlatMapMapDataset",
        "FlatMapIterDataset": _EXP + "FlatMapIterDataset",
    },
    _tr("interleave"): {"InterleaveIterDataset": _EXP + "InterleaveIterDataset"},
    _tr("limit"): {"LimitIterDataset": _EXP + "LimitIterDataset"},
    _tr("map"): {
        "MapMapDataset": _KERNEL + "MapMapDataset",
        "MapIterDataset": _KERNEL + "MapIterDataset",
        "RandomMapMapDataset": _KERNEL + "RandomMapMapDataset",
        "RandomMapIterDataset": _KERNEL + "RandomMapIterDataset",
        "MapWithIndexMapDataset": _KERNEL + "MapWithIndexMapDataset",
        "MapWithIndexIterDataset": _KERNEL + "MapWithIndexIterDataset",
    },
    _tr("mix"): {
        "MixedMapDataset": _KERNEL + "MixedMapDataset",
        "MixedIterDataset": _KERNEL + "MixedIterDataset",
        "ConcatenateMapDataset": _KERNEL + "ConcatenateMapDataset",
    },
    _tr("packing"): {
        "FirstFitPackIterDataset": _EXP + "FirstFitPackIterDataset",
        "BestFitPackIterDataset": _EXP + "BestFitPackIterDataset",
    },
    _tr("packing_concat_then_split"): {
        "ConcatThenSplitIterDataset": _EXP + "ConcatThenSplitIterDataset",
        "BOSHandling": _EXP + "BOSHandling",
    },
    _tr("prefetch"): {
        "PrefetchIterDataset": _KERNEL + "PrefetchIterDataset",
        "PrefetchDatasetIterator": "grain_core.dataset:PrefetchDatasetIterator",
        "ThreadPrefetchIterDataset": _EXP + "ThreadPrefetchIterDataset",
        "ThreadPrefetchDatasetIterator": _EXP + "ThreadPrefetchDatasetIterator",
        "multithread_prefetch": _EXP + "multithread_prefetch",
        "MultiprocessPrefetchIterDataset": _EXP + "MultiprocessPrefetchIterDataset",
    },
    _tr("rebatch"): {"RebatchIterDataset": _EXP + "RebatchIterDataset"},
    _tr("repeat"): {
        "RepeatMapDataset": _KERNEL + "RepeatMapDataset",
        "RepeatIterDataset": _EXP + "RepeatIterDataset",
    },
    _tr("shuffle"): {
        "ShuffleMapDataset": _KERNEL + "ShuffleMapDataset",
        "WindowShuffleMapDataset": _EXP + "WindowShuffleMapDataset",
        "WindowShuffleIterDataset": _EXP + "WindowShuffleIterDataset",
    },
    _tr("slice"): {"SliceMapDataset": _KERNEL + "SliceMapDataset"},
    _tr("source"): {
        "SourceMapDataset": _KERNEL + "SourceMapDataset",
        "RangeMapDataset": _PRIV + "RangeMapDataset",
    },
    _tr("zip"): {
        "ZipMapDataset": _EXP + "ZipMapDataset",
        "ZipIterDataset": _EXP + "ZipIterDataset",
    },
}

#: Paths that older Grain releases had and 0.2.18 renamed: old path -> the 0.2.18 path whose
#: entry it shares (``grain._src.core.tree`` became ``tree_lib``, ``shared_memory_array`` moved
#: into ``ipc``, ``checkpoint_handlers`` became ``checkpoint.handler``).
OLDER_GRAIN_PATHS: dict[str, str] = {
    "grain._src.core.tree": "grain._src.core.tree_lib",
    "grain._src.python.shared_memory_array": "grain._src.python.ipc.shared_memory_array",
    "grain._src.python.checkpoint_handlers": "grain._src.python.checkpoint.handler",
}

#: Names that older Grain releases had at a path and 0.2.18 moved (public code still imports them
#: there): ``RandomAccessDataSource`` lived in ``data_sources`` before ``dataset.base``;
#: ``MultiprocessPrefetchIterDataset`` (what ``mp_prefetch`` returns; axlearn checks
#: ``isinstance`` against it) lived in ``transformations.prefetch``.
OLDER_GRAIN_NAMES: frozenset[tuple[str, str]] = frozenset(
    {
        ("grain._src.python.data_sources", "RandomAccessDataSource"),
        (_tr("prefetch"), "MultiprocessPrefetchIterDataset"),
    }
)


def _entry(path: str) -> Mapping[str, str] | None:
    return PRIVATE_PATHS.get(OLDER_GRAIN_PATHS.get(path, path))


def is_private_path(fullname: str) -> bool:
    """Whether ``fullname`` is a module of the table (or an older name of one)."""
    return _entry(fullname) is not None


def is_private_package(fullname: str) -> bool:
    """Whether ``fullname`` is a package above a module of the table (``grain._src``, ...)."""
    if fullname != PRIVATE_ROOT and not fullname.startswith(PRIVATE_ROOT + "."):
        return False
    prefix = fullname + "."
    return any(p.startswith(prefix) for p in (*PRIVATE_PATHS, *OLDER_GRAIN_PATHS))


def _distribution(module: str) -> str | None:
    top = module.split(".")[0]
    return top.replace("_", "-") if top.startswith("grain_plugin_") else None


def resolve(path: str, name: str) -> Any:
    """The grain_core object the table maps ``name`` of Grain's module ``path`` to."""
    entry = _entry(path)
    if entry is None:
        raise KeyError(f"{path!r} is not in grain_core's table of Grain's private paths.")
    target = entry.get(name)
    if target is None:
        raise AttributeError(
            f"module {path!r} (Grain's private module, served by grain_core.compat) has no "
            f"attribute {name!r}: grain_core maps only the names public code imports from it "
            f"({', '.join(sorted(entry))}). Use Grain's public API (grain.*, grain.experimental.*) "
            "for anything else."
        )
    module, _, attribute = target.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        dist = _distribution(module)
        if dist is None or (e.name or "").split(".")[0] != module.split(".")[0]:
            raise
        raise ImportError(
            f"{path}.{name} is provided by the plugin {dist}, which is not installed: "
            f"pip install {dist}",
            name=path,
        ) from e
    value: Any = mod
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def make_module(fullname: str) -> ModuleType:
    """A module object for a table path or a package above one (see the module docstring)."""
    mod = ModuleType(fullname)
    entry = _entry(fullname)
    if entry is None:
        if not is_private_package(fullname):
            raise KeyError(f"{fullname!r} is not in grain_core's table of Grain's private paths.")
        mod.__doc__ = f"Grain's private package {fullname}, as far as grain_core.compat maps it."
        mod.__path__ = []  # a package: its table submodules are found by the alias finder
        return mod
    mod.__doc__ = (
        f"Grain's private module {fullname}, mapped by grain_core.compat.private_paths to "
        "grain_core objects."
    )
    mod.__all__ = sorted(n for n in entry if not n.startswith("_"))  # type: ignore[attr-defined]
    if is_private_package(fullname):
        mod.__path__ = []

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = resolve(fullname, name)
        setattr(mod, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(mod)) | set(entry))

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    mod.__dir__ = __dir__  # type: ignore[method-assign]
    return mod


def _display(target: str) -> str:
    module, _, attribute = target.partition(":")
    if target.startswith(_KERNEL):
        return f"`{attribute.rpartition('.')[2]}` (the kernel's stage)"
    return f"`{module}.{attribute}`"


def markdown_table() -> str:
    """The table as ``docs/migration.md`` shows it: one row per Grain path."""
    rows = ["| Grain path | Grain name: grain_core object |", "| --- | --- |"]
    for path in sorted(PRIVATE_PATHS):
        entry = PRIVATE_PATHS[path]
        older = [old for old, new in OLDER_GRAIN_PATHS.items() if new == path]
        shown = f"`{path}`" + "".join(f" (also `{old}`)" for old in older)
        names = "; ".join(f"`{n}`: {_display(entry[n])}" for n in sorted(entry))
        rows.append(f"| {shown} | {names} |")
    return "\n".join(rows) + "\n"


def installed_modules() -> list[str]:
    """The names of the table's modules now in ``sys.modules`` (for the alias's uninstall)."""
    return [n for n in sys.modules if n == PRIVATE_ROOT or n.startswith(PRIVATE_ROOT + ".")]
