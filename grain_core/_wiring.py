"""Connects the kernel's layers where a lower one calls up (see ``docs/architecture.md``).

The dataset kernel's ``IterDataset.mp_prefetch`` builds a runtime stage and ``DatasetIterator.save`` /
``load`` write and read checkpoint files; the plugin registry refuses plugin factories that would
shadow a method of ``MapDataset``/``IterDataset``, and loads the kernel's built-in plugin
(:mod:`grain_core.runtime.builtin`: the ``"processes"`` runtime, through the ``register_runtimes``
hook). Those lower layers never import the runtime, the
checkpoint package or the dataset kernel: this module, imported by ``grain_core/__init__``, fills
their typed tables (:mod:`grain_core.dataset.locator`): ``base.builders.MultiprocessPrefetchIterDataset``,
``iterator.checkpoint_io`` and ``locator.hooks.debug_iterator``. The runtime and checkpoint modules
are still imported only when first used.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from grain_core import (
    debug,
    element_spec,  # noqa: F401 -- installs element-spec inference into the kernel
)
from grain_core.dataset.base import IterDataset, MapDataset, builders
from grain_core.dataset.iterator import DatasetIterator, checkpoint_io
from grain_core.dataset.locator import hooks
from grain_core.plugins import registry
from grain_core.runtime import builtin as builtin_plugin

if TYPE_CHECKING:
    from grain_core.options import MultiprocessingOptions

__all__: list[str] = []


def _mp_prefetch_stage(
    parent: IterDataset[Any],
    options: MultiprocessingOptions | None,
    /,
    *,
    worker_init_fn: Callable[[int, int], None] | None,
    runtime: Any,
    sequential_slice: bool,
) -> IterDataset[Any]:
    """``IterDataset.mp_prefetch``'s stage: the runtime's ``MultiprocessPrefetchIterDataset``."""
    from grain_core.runtime.multiprocess import MultiprocessPrefetchIterDataset

    return MultiprocessPrefetchIterDataset(
        parent, options, worker_init_fn=worker_init_fn, runtime=runtime, sequential_slice=sequential_slice
    )


def _save_iterator_state(iterator: DatasetIterator[Any], directory: Any) -> Coroutine[Any, Any, None]:
    """``DatasetIterator.save``: ``grain_core.checkpoint.save_iterator_state``."""
    from grain_core.checkpoint import save_iterator_state

    return save_iterator_state(iterator, directory)


def _load_iterator_state(iterator: DatasetIterator[Any], directory: Any) -> Coroutine[Any, Any, None]:
    """``DatasetIterator.load``: ``grain_core.checkpoint.load_iterator_state``."""
    from grain_core.checkpoint import load_iterator_state

    return load_iterator_state(iterator, directory)


# The fills from above the dataset kernel (tests/test_layers.py allows exactly these).
hooks.debug_iterator = debug.debug_iterator
builders.MultiprocessPrefetchIterDataset = _mp_prefetch_stage
checkpoint_io.save_iterator_state = _save_iterator_state
checkpoint_io.load_iterator_state = _load_iterator_state


def _own_names(cls: type) -> Callable[[], set[str]]:
    """The names ``cls`` and its metaclass define themselves (a plugin factory cannot take them)."""
    return lambda: {*vars(cls), *vars(type(cls))}


for _cls in (MapDataset, IterDataset):
    registry.reserve_factory_names(_cls.__name__, _own_names(_cls))

registry.get_registry().add_builtin(builtin_plugin, builtin_plugin.PLUGIN_NAME)
