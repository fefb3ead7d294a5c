"""The job a runtime hands its workers: :class:`WorkerJob` and the :class:`WorkerEnvironment` it carries.

Part of the runtime API (:mod:`grain_core.runtime.api` re-exports the public names; see
``docs/runtime.md``). A job is built in the consumer (:meth:`WorkerJob.create`) and is picklable
with plain ``pickle``: the pipeline travels cloudpickled in ``payload``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

from grain_core.dataset.base import IterDataset
from grain_core.global_config import config
from grain_core.options import MultiprocessingOptions

__all__ = ["DEBUG_OPTIONS", "ENV_PREFIX", "WorkerEnvironment", "WorkerJob"]

#: Environment variables with this prefix (plugin selection) travel from the consumer to workers.
ENV_PREFIX = "GRAIN_CORE_"

#: The ``grain_core.config`` options workers take from the consumer (Grain's debug flags).
DEBUG_OPTIONS = ("py_debug_mode", "py_dataset_visualization_output_dir")


@dataclasses.dataclass(frozen=True)
class WorkerEnvironment:
    """What a worker needs of the consumer's interpreter, captured in the consumer
    (:meth:`capture`) and applied first thing in the worker (:meth:`apply`):

    * ``sys_path``: the consumer's ``sys.path`` exactly. The working directory (``''``) is on it
      only if it was on the consumer's; a helper process started with ``python -c`` must not add it.
    * ``env``: the consumer's ``GRAIN_CORE_*`` environment variables (plugin selection).
    * ``plugin_modules``: modules of plugins registered explicitly with
      ``grain_core.plugins.register`` that are importable by name (in ``sys.modules``); the worker
      imports and registers them. Entry-point plugins are discovered again.
    * ``debug_options``: the consumer's Grain debug options (:data:`DEBUG_OPTIONS`:
      ``py_debug_mode``, ``py_dataset_visualization_output_dir``), set in the worker's
      ``grain_core.config`` as Grain's ``mp_prefetch`` sets them in its workers (so a custom
      stage's ``self._stats`` records there too; see ``grain_core.dataset.grain_stats``).
    """

    sys_path: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    plugin_modules: tuple[str, ...]
    debug_options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def capture(cls) -> WorkerEnvironment:
        from grain_core.plugins.registry import get_registry

        return cls(
            sys_path=tuple(sys.path),
            env=tuple(sorted(_plugin_env().items())),
            plugin_modules=tuple(
                m for m in get_registry().explicit_module_names() if m in sys.modules
            ),
            debug_options=tuple((k, config.get_or_default(k)) for k in DEBUG_OPTIONS),
        )

    def apply(self) -> None:
        """Makes this interpreter's ``sys.path``, ``GRAIN_CORE_*`` variables and plugins the
        consumer's (re-running plugin discovery only when the variables differ)."""
        sys.path[:] = list(self.sys_path)
        env = dict(self.env)
        from grain_core.plugins.registry import get_registry, reimport_explicit

        if _plugin_env() != env:
            for k in [k for k in os.environ if k.startswith(ENV_PREFIX) and k not in env]:
                del os.environ[k]
            os.environ.update(env)
            get_registry().reload()
        reimport_explicit(list(self.plugin_modules))
        for name, value in self.debug_options:
            if config.get_or_default(name) != value:
                config.update(name, value)


def _plugin_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}


@dataclasses.dataclass(frozen=True)
class WorkerJob:
    """Everything a worker needs, picklable with plain ``pickle``: the pipeline (and
    ``worker_init_fn`` and the statistics hook) serialised with cloudpickle in ``payload``."""

    payload: bytes
    worker_count: int
    buffer_size: int
    environment: WorkerEnvironment
    profiling: bool = False
    #: Workers read contiguous blocks of the sources (``mp_prefetch(sequential_slice=True)``).
    sequential_slice: bool = False

    @classmethod
    def create(
        cls,
        dataset: IterDataset,
        options: MultiprocessingOptions,
        worker_init_fn: Callable[[int, int], None] | None = None,
        stats_hook: Callable[[Any], tuple[Any, Callable[[], Any]]] | None = None,
        *,
        sequential_slice: bool = False,
    ) -> WorkerJob:
        """``stats_hook(dataset) -> (iterator, report)`` replaces ``iter(dataset)`` in the workers
        when statistics are collected (``grain_core.stats``); ``report()`` is sent before each
        :class:`Elements`."""
        from grain_core.runtime.pickling import dumps_pipeline

        _by_value_ambiguous_modules()
        return cls(
            payload=dumps_pipeline((dataset, worker_init_fn, stats_hook), dataset),
            worker_count=options.num_workers,
            buffer_size=options.per_worker_buffer_size,
            environment=WorkerEnvironment.capture(),
            profiling=options.enable_profiling,
            sequential_slice=sequential_slice,
        )


_checked_modules: dict[tuple[str, str], bool] = {}


def _by_value_ambiguous_modules() -> None:
    """Makes cloudpickle send by value the top-level modules that a worker could not import by name
    as the same file (pytest's several ``conftest`` / rootdir-inserted test modules)."""
    import importlib.machinery

    import cloudpickle

    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if "." in name or name.startswith("__") or not path or getattr(mod, "__package__", None):
            continue
        key = (name, path)
        if key not in _checked_modules:
            try:
                # Searched on the path, as a worker would (find_spec would answer from sys.modules).
                spec = importlib.machinery.PathFinder.find_spec(name, sys.path)
                origin = spec.origin if spec is not None else None
            except (ImportError, ValueError):
                origin = None
            ambiguous = (
                origin is not None
                and os.path.isfile(origin)  # not "frozen" / "built-in"
                and os.path.realpath(origin) != os.path.realpath(path)
            )
            _checked_modules[key] = ambiguous
            if ambiguous:
                try:
                    cloudpickle.register_pickle_by_value(mod)
                except (ValueError, TypeError):
                    pass
