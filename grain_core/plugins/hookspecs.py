"""The hooks a grain_core plugin implements. Project name: ``grain_core``.

A plugin is a module (or object) with functions marked ``@grain_core.plugins.hookimpl`` named after
the hooks below, exposed through an entry point in the ``grain_core`` group::

    [project.entry-points.grain_core]
    myplugin = "grain_plugin_my.plugin"

Each hook receives a ``register`` callable; what a plugin registers is validated by the kernel and
recorded with the plugin's distribution and version.
"""

from __future__ import annotations

from typing import Any, Protocol

import pluggy

PROJECT_NAME = "grain_core"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class RegisterFn(Protocol):
    def __call__(self, obj: Any, name: str | None = None, **options: Any) -> None: ...


@hookspec
def register_sources(register: RegisterFn) -> None:
    """Register data sources: ``register(obj, name=None, experimental=False)``.

    ``obj`` is a class or factory producing a random-access data source (``__len__`` and
    ``__getitem__``) or an ``IterDataset``. It becomes ``grain_core.sources.<name>`` and
    ``grain_core.<name>``; with ``experimental=True`` also ``grain_core.experimental.<name>``.
    ``name`` defaults to ``obj.__name__``.
    """


@hookspec
def register_transforms(register: RegisterFn) -> None:
    """Register dataset transformations: ``register(obj, name=None)``.

    ``obj`` is a ``MapDataset``/``IterDataset`` subclass or a function taking a dataset first and
    returning a dataset (usable with ``ds.pipe(obj, ...)``). It becomes
    ``grain_core.experimental.<name>``.
    """


@hookspec
def register_dataset_factories(register: RegisterFn) -> None:
    """Register factory methods on the dataset classes: ``register(func, name=None, on="MapDataset")``.

    ``func`` becomes ``MapDataset.<name>`` (or ``IterDataset.<name>`` with ``on="IterDataset"``),
    e.g. ``MapDataset.range``. Factories cannot shadow the kernel's own methods.
    """


@hookspec
def register_runtimes(register: RegisterFn) -> None:
    """Register runtimes for ``mp_prefetch``: ``register(obj, name=None)``.

    ``obj`` is a class or factory that, called without arguments, returns a runtime: an object with
    ``start_workers(job: grain_core.runtime.api.WorkerJob) -> WorkerPool`` (see
    ``grain_core.runtime.api`` and "Write a runtime" in ``docs/writing-plugins.md``). It is then
    selected with ``ds.mp_prefetch(options, runtime="<name>")``. ``name`` defaults to
    ``obj.__name__``. The kernel registers its own ``"processes"`` runtime through this same hook
    (its built-in plugin, :mod:`grain_core.runtime.builtin`); that name cannot be taken.
    """
