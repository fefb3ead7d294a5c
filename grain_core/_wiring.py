"""Connects the kernel's layers where a lower one calls up (see ``docs/architecture.md``).

The dataset kernel's ``IterDataset.mp_prefetch`` builds a runtime stage and ``DatasetIterator.save`` /
``load`` write and read checkpoint files; the plugin registry refuses plugin factories that would
shadow a method of ``MapDataset``/``IterDataset``, and loads the kernel's built-in plugin
(:mod:`grain_core.runtime.builtin`: the ``"processes"`` runtime, through the ``register_runtimes``
hook). Those lower layers never import the runtime, the
checkpoint package or the dataset kernel: this module, imported by ``grain_core/__init__``, installs
the implementations into them. The runtime and checkpoint modules are still imported only when first
used.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from grain_core import (
    debug,
    element_spec,  # noqa: F401 -- installs element-spec inference into the kernel
)
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.locator import installed
from grain_core.plugins import registry
from grain_core.runtime import builtin as builtin_plugin

__all__: list[str] = []


def _mp_prefetch_stage(*args: Any, **kwargs: Any) -> Any:
    from grain_core.runtime.multiprocess import MultiprocessPrefetchIterDataset

    return MultiprocessPrefetchIterDataset(*args, **kwargs)


def _save_iterator_state(iterator: Any, directory: Any) -> Coroutine[Any, Any, None]:
    from grain_core.checkpoint import save_iterator_state

    return save_iterator_state(iterator, directory)


def _load_iterator_state(iterator: Any, directory: Any) -> Coroutine[Any, Any, None]:
    from grain_core.checkpoint import load_iterator_state

    return load_iterator_state(iterator, directory)


installed.install(
    debug_iterator=debug.debug_iterator,
    MultiprocessPrefetchIterDataset=_mp_prefetch_stage,
    save_iterator_state=_save_iterator_state,
    load_iterator_state=_load_iterator_state,
)

def _own_names(cls: type) -> Callable[[], set[str]]:
    """The names ``cls`` and its metaclass define themselves (a plugin factory cannot take them)."""
    return lambda: {*vars(cls), *vars(type(cls))}


for _cls in (MapDataset, IterDataset):
    registry.reserve_factory_names(_cls.__name__, _own_names(_cls))

registry.get_registry().add_builtin(builtin_plugin, builtin_plugin.PLUGIN_NAME)
