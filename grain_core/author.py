"""The plugin-author API in one import: everything a stage, source or runtime author needs.

``import grain_core as grain`` gives the user API (``grain.MapDataset``, ``grain.experimental``,
``grain.sources``, ...); ``from grain_core.author import ...`` gives the rest of what a plugin
uses from the kernel, so a plugin imports the kernel only through these two (the conformance kit,
``grain_core.testing``, serves its tests). The names, by what they are for:

Stages (``docs/writing-plugins.md``, "Writing a stage")
  ``MapDataset``, ``IterDataset``, ``DatasetIterator`` and the bases ``OneParentMapDataset``,
  ``OneParentIterDataset``, ``OneParentIterator``, ``ManyParentIterDataset``,
  ``ManyParentIterator``, ``SourceIterDataset``, ``SourceIterator``.
Chunk protocol and give-back
  ``DatasetIterator.next_chunk(n)``; ``DatasetIterator.can_unread`` / ``unread(count)``;
  ``CHUNK_BYTES``, the bytes a chunk holds at most.
  ``list_serving_next``: a ``__next__`` serving a list of ready elements before the thread guard.
States
  ``StateField``, ``make_state``, ``expect_state``, ``check_state_int``, ``fingerprint``, the
  errors ``InvalidStateError`` / ``StateMismatchError`` / ``StateOutOfRangeError`` and the rest of
  :mod:`grain_core.state`.
Seeds
  ``derive_seed``, ``default_seed``, ``validate_seed``, ``IndexShuffle``, ``index_shuffle``,
  ``shuffle_tables``, ``SHUFFLE_ROUNDS``, ``grain_block_is_short``, ``element_rng`` ...
  (:mod:`grain_core.seeds`, :mod:`grain_core.shuffle_cipher`).
Validation
  ``check_int``, ``check_indices``, ``ArgumentTypeError``; ``mode_fields`` (Grain-exact options).
Index arrays
  ``unique_ints``: ``np.unique`` of an index array without its ``numpy.ma`` import.
Worker shares (stages that split their input among ``mp_prefetch`` workers)
  ``claim_worker_share``, ``no_worker_share``, ``current_worker``, ``worker_share``, ...
Trees and files
  :mod:`grain_core.tree`'s ``map_structure``, ``nbytes``, ...; :mod:`grain_core.filesystems`'s
  ``resolve_filesystem``, ``read_ranges``, ``retry_ranges``, ``RetryPolicy``, ...
Plugins and runtimes
  ``hookimpl``, ``register``, ``ENTRY_POINT_GROUP``, the plugin errors; the runtime API
  (``WorkerJob``, ``WorkerLoop``, ``WorkerPool``, the messages ``Start`` / ``Elements`` / ``End`` /
  ``Failure`` / ...), see ``docs/writing-plugins.md``, "Write a runtime".
Shared memory (a runtime whose workers share the consumer's host)
  ``MessageWriter`` / ``MessageReader``, ``ShmFullError``, ``new_shm_prefix``, ``sweep_shm``,
  ``reclaim_stale_shm``, ``shm_min_free_bytes``, ``lend_allowance``, ``SHM_AVAILABLE``: ``mp_prefetch``'s transport
  (:mod:`grain_core.runtime.shm`), see ``docs/writing-plugins.md``, "Shared memory for a runtime".
  The whole pipe transport for workers on the consumer's host that the runtime starts itself:
  ``PipePool`` / ``PipeChannel`` / ``PipeWorker`` (the consumer's side,
  :mod:`grain_core.runtime.pipe_pool`), ``PipeEndpoint`` (the worker's side) and ``CreditSender``,
  see ``docs/writing-plugins.md``, "The pipe transport for a runtime".
Memory
  ``tune_malloc``: glibc's mmap and trim thresholds set once per process, so a stream of large
  buffers allocated and freed (elements, range reads) reuses its pages instead of faulting them in
  afresh (:mod:`grain_core.runtime.malloc_tuning`; ``mp_prefetch`` calls it in the consumer and the
  workers; a source reading large byte ranges calls it in the reading process).
Threads
  ``ReadAhead``: an iterator read ahead by a background thread with exact states, bounded stops
  and interrupt-safe commits (what thread prefetch and interleave's ``iter_buffer_size`` use).

Each name is the kernel's own object (``author.StateField is grain_core.state.StateField``). Names
are loaded when first used (PEP 562), so importing this module costs nothing and the runtime is
imported only by a plugin that uses it.
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports below are re-exports, listed in __all__)
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_MODULES: dict[str, tuple[str, ...]] = {
    "grain_core.dataset.base": ("IterDataset", "MapDataset"),
    "grain_core.dataset.iterator": ("DatasetIterator",),
    "grain_core.dataset.stages": (
        "ManyParentIterDataset",
        "ManyParentIterator",
        "OneParentIterDataset",
        "OneParentIterator",
        "OneParentMapDataset",
        "SourceIterDataset",
        "SourceIterator",
    ),
    "grain_core.dataset.chunking": ("CHUNK_BYTES",),
    "grain_core.dataset.fast_next": ("list_serving_next",),
    "grain_core.dataset.sharing": (
        "WorkerShare",
        "claim_worker_share",
        "current_worker",
        "no_worker_share",
        "sequential_worker_share",
        "worker_share",
    ),
    "grain_core.state": (
        "IDENTIFYING_FIELDS",
        "STATE_FORMAT_VERSION",
        "InvalidStateError",
        "StateField",
        "StateMismatchError",
        "StateOutOfRangeError",
        "check_fingerprint",
        "check_json_state",
        "check_same_pipeline",
        "check_state_fields",
        "check_state_int",
        "check_state_types",
        "expect_state",
        "explain_stage_difference",
        "fingerprint",
        "make_state",
        "rollback_on_error",
    ),
    "grain_core.seeds": (
        "MAX_SEED",
        "ElementRngs",
        "default_seed",
        "derive_seed",
        "element_rng",
        "validate_seed",
    ),
    "grain_core.shuffle_cipher": (
        "SHUFFLE_ROUNDS",
        "IndexPermutation",
        "IndexShuffle",
        "grain_block_is_short",
        "index_shuffle",
        "shuffle_tables",
    ),
    "grain_core.validation": ("ArgumentTypeError", "check_indices", "check_int"),
    "grain_core.index_arrays": ("unique_ints",),
    "grain_core.global_config": ("mode_fields",),
    "grain_core.tree": (
        "TreeStructureError",
        "assert_same_structure",
        "concatenate",
        "flatten",
        "flatten_with_path",
        "flatten_with_paths",
        "map_structure",
        "map_structure_with_path",
        "nbytes",
        "spec_like",
        "stack",
        "unflatten_as",
    ),
    "grain_core.filesystems": (
        "RetryPolicy",
        "check_filesystem_args",
        "file_size",
        "is_local",
        "is_transient",
        "read_ranges",
        "resolve_filesystem",
        "retry_ranges",
        "storage_token",
        "with_retries",
    ),
    "grain_core.plugins": (
        "ENTRY_POINT_GROUP",
        "PluginConflictError",
        "PluginError",
        "PluginInfo",
        "PluginNameError",
        "hookimpl",
        "register",
        "unregister",
    ),
    "grain_core.plugins.hookspecs": ("RegisterFn",),
    "grain_core.runtime.api": (
        "AHEAD_BYTES",
        "STATE_KIND",
        "Channel",
        "Consumed",
        "Elements",
        "End",
        "Failure",
        "Idle",
        "Mark",
        "Position",
        "RoundRobinConsumer",
        "Runtime",
        "Start",
        "Stats",
        "Stop",
        "Template",
        "WorkerEndpoint",
        "WorkerEnvironment",
        "WorkerError",
        "WorkerJob",
        "WorkerLoop",
        "WorkerLostError",
        "WorkerPool",
        "next_or_rollback",
    ),
    "grain_core.runtime.credits": ("CreditSender",),
    "grain_core.runtime.malloc_tuning": ("tune_malloc",),
    "grain_core.runtime.pipe_pool": ("PipeChannel", "PipePool", "PipeWorker"),
    "grain_core.runtime.process_worker": ("PipeEndpoint",),
    "grain_core.runtime.read_ahead": ("ReadAhead",),
    "grain_core.runtime.shm": (
        "SHM_AVAILABLE",
        "MessageReader",
        "MessageWriter",
        "ShmFullError",
        "lend_allowance",
        "new_shm_prefix",
        "reclaim_stale_shm",
        "shm_min_free_bytes",
        "sweep_shm",
    ),
}

_HOME: dict[str, str] = {name: mod for mod, names in _MODULES.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    """Loads ``name`` from its kernel module on first use (PEP 562) and keeps it here."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(
            f"module 'grain_core.author' has no attribute {name!r}: the plugin-author API is "
            "listed in grain_core.author.__all__ (see docs/writing-plugins.md)"
        )
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # the same names, for type checkers
    from grain_core.dataset.base import IterDataset, MapDataset
    from grain_core.dataset.chunking import CHUNK_BYTES
    from grain_core.dataset.fast_next import list_serving_next
    from grain_core.dataset.iterator import DatasetIterator
    from grain_core.dataset.sharing import (
        WorkerShare,
        claim_worker_share,
        current_worker,
        no_worker_share,
        sequential_worker_share,
        worker_share,
    )
    from grain_core.dataset.stages import (
        ManyParentIterator,
        ManyParentIterDataset,
        OneParentIterator,
        OneParentIterDataset,
        OneParentMapDataset,
        SourceIterator,
        SourceIterDataset,
    )
    from grain_core.filesystems import (
        RetryPolicy,
        check_filesystem_args,
        file_size,
        is_local,
        is_transient,
        read_ranges,
        resolve_filesystem,
        retry_ranges,
        storage_token,
        with_retries,
    )
    from grain_core.global_config import mode_fields
    from grain_core.index_arrays import unique_ints
    from grain_core.plugins import (
        ENTRY_POINT_GROUP,
        PluginConflictError,
        PluginError,
        PluginInfo,
        PluginNameError,
        hookimpl,
        register,
        unregister,
    )
    from grain_core.plugins.hookspecs import RegisterFn
    from grain_core.runtime.api import (
        AHEAD_BYTES,
        STATE_KIND,
        Channel,
        Consumed,
        Elements,
        End,
        Failure,
        Idle,
        Mark,
        Position,
        RoundRobinConsumer,
        Runtime,
        Start,
        Stats,
        Stop,
        Template,
        WorkerEndpoint,
        WorkerEnvironment,
        WorkerError,
        WorkerJob,
        WorkerLoop,
        WorkerLostError,
        WorkerPool,
        next_or_rollback,
    )
    from grain_core.runtime.credits import CreditSender
    from grain_core.runtime.malloc_tuning import tune_malloc
    from grain_core.runtime.pipe_pool import PipeChannel, PipePool, PipeWorker
    from grain_core.runtime.process_worker import PipeEndpoint
    from grain_core.runtime.read_ahead import ReadAhead
    from grain_core.runtime.shm import (
        SHM_AVAILABLE,
        MessageReader,
        MessageWriter,
        ShmFullError,
        lend_allowance,
        new_shm_prefix,
        reclaim_stale_shm,
        shm_min_free_bytes,
        sweep_shm,
    )
    from grain_core.seeds import (
        MAX_SEED,
        ElementRngs,
        default_seed,
        derive_seed,
        element_rng,
        validate_seed,
    )
    from grain_core.shuffle_cipher import (
        SHUFFLE_ROUNDS,
        IndexPermutation,
        IndexShuffle,
        grain_block_is_short,
        index_shuffle,
        shuffle_tables,
    )
    from grain_core.state import (
        IDENTIFYING_FIELDS,
        STATE_FORMAT_VERSION,
        InvalidStateError,
        StateField,
        StateMismatchError,
        StateOutOfRangeError,
        check_fingerprint,
        check_json_state,
        check_same_pipeline,
        check_state_fields,
        check_state_int,
        check_state_types,
        expect_state,
        explain_stage_difference,
        fingerprint,
        make_state,
        rollback_on_error,
    )
    from grain_core.tree import (
        TreeStructureError,
        assert_same_structure,
        concatenate,
        flatten,
        flatten_with_path,
        flatten_with_paths,
        map_structure,
        map_structure_with_path,
        nbytes,
        spec_like,
        stack,
        unflatten_as,
    )
    from grain_core.validation import ArgumentTypeError, check_indices, check_int
