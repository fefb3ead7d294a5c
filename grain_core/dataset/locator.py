"""The stage locator: where ``MapDataset`` / ``IterDataset`` methods find the stages they build.

The methods of the dataset protocols (``ds.map``, ``ds.mp_prefetch``, ``it.save`` ...) build stages
whose classes live in modules that import the protocols: sibling modules of the dataset kernel,
and the runtime and checkpoint layers above. Those modules install their classes and functions into
:data:`installed` (``grain_core.dataset`` its own, ``grain_core._wiring`` the runtime's and
checkpoint's), so the protocols never import them and the dependency points up only at run time
(``docs/architecture.md``). :func:`user_iter` routes the iterators users create through Grain's
debug options when ``grain_core.debug`` installed them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["installed", "user_iter"]


class _Installed:
    """The stage classes and functions the dataset protocols' methods build, installed by the modules that
    define them: ``grain_core.dataset`` installs its own stages, ``grain_core._wiring`` the runtime's
    and checkpoint's. Importing ``grain_core`` (or any of its modules) installs all of them, so the
    dependency points up only at run time, never as an import."""

    def install(self, **implementations: Any) -> None:
        vars(self).update(implementations)

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            f"grain_core's {name} is not installed: import grain_core (not grain_core.dataset.base "
            "alone, e.g. from a file path) to wire the kernel's layers together."
        )


installed = _Installed()


_iter_local = threading.local()


def user_iter(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wraps a dataset class's ``__iter__`` so Grain's debug options (``grain_core.debug``,
    installed as ``debug_iterator``) see the iterators a user creates."""

    @functools.wraps(fn)
    def __iter__(self: Any) -> Any:
        # Only module-level functions here: cloudpickle sends a class defined in __main__ with
        # its methods by value, with the globals they name (a thread-local would not pickle).
        return _call_iter(self, fn)

    __iter__._grain_core_user_iter = True  # type: ignore[attr-defined]
    return __iter__


def _call_iter(ds: Any, fn: Callable[[Any], Any]) -> Any:
    hook = installed.__dict__.get("debug_iterator")
    if hook is None or getattr(_iter_local, "inside", False):
        return fn(ds)
    return hook(ds, fn, _iter_local)
