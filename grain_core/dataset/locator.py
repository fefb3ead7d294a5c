"""Typed wiring: how the dataset protocols build stages whose modules import them.

``MapDataset.map`` builds a ``MapMapDataset``, whose module imports ``MapDataset``; ``mp_prefetch``
builds a runtime stage and ``DatasetIterator.save`` calls the checkpoint package, both above the
dataset kernel. The protocol module cannot import those modules (that would be a circle, or an
import up the layers), so it declares what it calls in a :class:`StageTable`: one annotated
attribute per builder, named after what it builds. The module that defines a builder (or, for a
layer above, ``grain_core._wiring``) assigns it, ``builders.MapMapDataset = map_ops.MapMapDataset``;
mypy checks that assignment against the annotation, and the protocol's calls
(``builders.MapMapDataset(self, transform)``) are typed by it. ``tests/test_layers.py`` reads every
assignment, so it knows which module fills which builder, and allows only the documented fills from
a layer above (``docs/architecture.md``).

The tables: :data:`hooks` here (Grain's debug options), ``grain_core.dataset.base.builders`` (the
stages and helpers of the dataset methods) and ``grain_core.dataset.iterator.checkpoint_io``
(``DatasetIterator.save`` / ``load``). :func:`user_iter` routes the iterators users create through
the debug hook when ``grain_core._wiring`` filled it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

__all__ = ["KernelHooks", "StageTable", "hooks", "user_iter"]


def _declared(cls: type) -> frozenset[str]:
    return frozenset(name for klass in cls.__mro__ for name in vars(klass).get("__annotations__", {}))


class StageTable:
    """A table of builders that a lower module calls and the modules defining them fill.

    A subclass declares each builder as a class annotation (no value). Assigning a name the
    subclass does not declare is an ``AttributeError``; reading a builder nobody filled is a
    ``RuntimeError`` saying how the kernel gets wired (``import grain_core``).
    """

    if not TYPE_CHECKING:  # mypy types each declared builder by its annotation, and nothing else

        def __setattr__(self, name: str, value: Any) -> None:
            if name not in _declared(type(self)):
                raise AttributeError(
                    f"{type(self).__name__} declares no builder {name!r}; declare it as an "
                    f"annotation of {type(self).__qualname__} first."
                )
            object.__setattr__(self, name, value)

        def __getattr__(self, name: str) -> Any:
            if name not in _declared(type(self)):
                raise AttributeError(f"{type(self).__name__} declares no builder {name!r}.")
            raise RuntimeError(
                f"grain_core's {name} is not wired in: import grain_core (not one of its modules "
                "alone, e.g. from a file path) to connect the kernel's layers."
            )

    def filled(self) -> frozenset[str]:
        """The builders assigned so far."""
        return frozenset(vars(self))


class KernelHooks(StageTable):
    """Hooks of the layer above that the iterators users create go through."""

    #: Grain's debug options around ``iter(ds)`` (filled by ``grain_core._wiring`` from
    #: ``grain_core.debug``): ``debug_iterator(ds, make, local)`` returns ``make(ds)``, watched.
    debug_iterator: Callable[[Any, Callable[[Any], Any], threading.local], Any]


hooks = KernelHooks()

_iter_local = threading.local()


def user_iter(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wraps a dataset class's ``__iter__`` so Grain's debug options (``grain_core.debug``,
    the :data:`hooks` ``debug_iterator``) see the iterators a user creates."""

    @functools.wraps(fn)
    def __iter__(self: Any) -> Any:
        # Only module-level functions here: cloudpickle sends a class defined in __main__ with
        # its methods by value, with the globals they name (a thread-local would not pickle).
        return _call_iter(self, fn)

    __iter__._grain_core_user_iter = True  # type: ignore[attr-defined]
    return __iter__


def _call_iter(ds: Any, fn: Callable[[Any], Any]) -> Any:
    hook = vars(hooks).get("debug_iterator")
    if hook is None or getattr(_iter_local, "inside", False):
        return fn(ds)
    return hook(ds, fn, _iter_local)
