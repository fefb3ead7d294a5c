"""The private attributes Grain's dataset base classes give their subclasses.

Custom stages written for Grain read attributes that Grain's ``MapDataset``, ``IterDataset`` and
``DatasetIterator`` set or compute, and that public subclasses (MaxText, webdataset adapters, ...)
rely on. The kernel's base classes take them from the mixins here, so such a subclass runs
unchanged. Contract, per attribute:

* ``_parent`` (datasets and iterators): the only parent, ``self._parents[0]``. Like Grain, it
  asserts that there is exactly one (``AssertionError`` naming the parents otherwise). A stage may
  assign ``self._parent`` itself; its own value then wins.
* ``_parents``: set by the base ``__init__`` (the kernel's, not here): a tuple of the parents.
* ``_ctx`` (iterators): an :class:`IteratorContext`. ``self._ctx.dataset_options`` is the
  pipeline's ``DatasetOptions`` as this iterator sees them (``DatasetOptions()`` when none were
  applied); assigning it applies options to this iterator and its parents. ``a._ctx = b._ctx``
  makes ``a`` share ``b``'s context (its options are ``b``'s). ``mp_context`` is Grain's
  ``MultiprocessingContext``: in an ``mp_prefetch`` worker, ``process_index`` is the worker's index
  and ``process_count`` the number of workers, for every iterator the worker creates while it
  builds its pipeline (a stage's inner iterators included); elsewhere (the main process, iterators
  created later, such as a new epoch's) ``process_index=0, process_count=1``. A subclass may assign
  another. ``merge`` keeps the other context's options where this one has none.
* ``_stats`` (datasets and iterators): Grain's ``Stats`` for the recording calls Grain stages make
  (``with self._stats.record_self_time(): ...``, ``self._stats.record_output_spec(x)``,
  ``record_bytes_consumed/produced``). They return their element unchanged; they record only when
  statistics are on (``py_debug_mode``, or ``STAGE_TIMING`` in the pipeline's options) when the
  stage first reads ``self._stats``, as in Grain: see :mod:`grain_core.dataset.grain_stats`.
* ``_closed`` (iterators): ``False`` until the base ``close()`` runs; ``_assert_not_closed()``
  raises Grain's ``ValueError`` after that.
* ``_MUTATES_ELEMENT_SPEC``: Grain's informational class flag (``True``).
* ``_getitems(indices)`` (map datasets): Grain's bulk read, the elements at ``indices``. A
  subclass that overrides it gets the kernel's bulk reads (:func:`route_getitems`), as in Grain.

:class:`Timer` and :func:`record_next_duration_if_output` (from
:mod:`grain_core.dataset.grain_stats`) are the helpers of Grain's stats module that stage code calls
(``@stats.record_next_duration_if_output`` on ``__next__``, ``timer = stats.Timer()``): the
decorator returns the method's result unchanged, the timer measures time. None of these attributes enters iterator states, so states and checkpoints are unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from grain_core.dataset.grain_stats import (
    Stats,
    Timer,
    make_stats,
    record_next_duration_if_output,
)
from grain_core.dataset.sharing import enclosing_worker
from grain_core.options import DatasetOptions
from grain_core.validation import check_instance

__all__ = [
    "DatasetAttrs",
    "IteratorAttrs",
    "IteratorContext",
    "MultiprocessingContext",
    "Stats",
    "Timer",
    "record_next_duration_if_output",
]

class _OnlyParent:
    """``obj._parent``: the single parent (a non-data descriptor: an assigned value wins)."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        parents: tuple[Any, ...] = tuple(getattr(obj, "_parents", ()))
        assert len(parents) == 1, (
            f"{type(obj).__name__}._parent needs exactly one parent, it has {len(parents)}: "
            f"{tuple(parents)!r}; use self._parents."
        )
        return parents[0]


@dataclasses.dataclass(frozen=True)
class MultiprocessingContext:
    """Grain's ``MultiprocessingContext``: which worker of how many runs this iterator."""

    process_index: int = 0
    process_count: int = 1


class IteratorContext:
    """Grain's ``IteratorContext`` seen from one iterator (see the module docstring)."""

    def __init__(self, owner: Any):
        self._owner = owner
        worker = owner.__dict__.get("_grain_worker") if owner is not None else None
        self.mp_context = MultiprocessingContext() if worker is None else MultiprocessingContext(*worker)

    @property
    def dataset_options(self) -> DatasetOptions:
        return self._owner.options or DatasetOptions()

    @dataset_options.setter
    def dataset_options(self, options: DatasetOptions) -> None:
        check_instance(options, DatasetOptions, "_ctx.dataset_options")
        self._owner.apply_options(options)

    def merge(self, other: IteratorContext) -> None:
        """Takes ``other``'s options where this context has none (Grain merges parents' contexts)."""
        theirs = other._owner.options
        if theirs is not None:
            self._owner.apply_options(theirs)

    def __getstate__(self) -> dict[str, Any]:
        return {"mp_context": self.mp_context}

    def __setstate__(self, state: dict[str, Any]) -> None:  # re-attached by the owner's _ctx
        self._owner = None
        self.mp_context = state["mp_context"]


class _Context:
    """``iterator._ctx``: one :class:`IteratorContext` per iterator, made on first use (a
    non-data descriptor: ``it._ctx = other._ctx`` shares ``other``'s context, as in Grain)."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        ctx = obj.__dict__.get("_grain_ctx")
        if ctx is None or ctx._owner is not obj:
            fresh = IteratorContext(obj)
            if ctx is not None:
                fresh.mp_context = ctx.mp_context
            ctx = obj.__dict__["_grain_ctx"] = fresh
        return ctx


_NO_STATS = Stats()


class _StatsAttr:
    """``obj._stats``: made on first read by :func:`grain_stats.make_stats` and kept (a non-data
    descriptor: an assigned value wins)."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        stats = obj.__dict__.get("_grain_stats")
        if stats is None:
            stats = obj.__dict__["_grain_stats"] = make_stats(obj, _NO_STATS)
        return stats


def route_getitems(user_getitems: Callable[[Any, Any], Any]) -> Callable[[Any, Any], list[Any]]:
    """``__getitems__`` for a ``MapDataset`` subclass that overrides Grain's ``_getitems``: the
    kernel's bulk reads go to it (``MapDataset.__init_subclass__`` installs this)."""

    def __getitems__(self: Any, indices: Any) -> list[Any]:
        return list(user_getitems(self, [int(i) for i in indices]))

    __getitems__._grain_routed = True  # type: ignore[attr-defined]
    return __getitems__


class DatasetAttrs:
    """Grain's private attributes of ``MapDataset`` and ``IterDataset`` (module docstring)."""

    _MUTATES_ELEMENT_SPEC = True
    _parent: Any = _OnlyParent()
    _stats: Any = _StatsAttr()

    def _getitems(self, indices: Any) -> list[Any]:
        """Grain's bulk read of a ``MapDataset``: the elements at ``indices`` (``None`` where
        missing), in order. A subclass may override it (its bulk reads then come here) and call
        ``self._parent._getitems(...)`` or ``super()._getitems(...)``."""
        if getattr(type(self).__getitems__, "_grain_routed", False):  # type: ignore[attr-defined]
            get = self.element_at  # type: ignore[attr-defined]
            return [get(int(i)) for i in indices]
        return list(self.__getitems__(indices))  # type: ignore[attr-defined]


class IteratorAttrs:
    """Grain's private attributes of ``DatasetIterator`` (module docstring)."""

    _MUTATES_ELEMENT_SPEC = True
    _parent: Any = _OnlyParent()
    _stats: Any = _StatsAttr()
    _ctx: Any = _Context()
    _closed: bool = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__new__(cls)
        worker = enclosing_worker()  # the mp_prefetch worker building this iterator, if any
        if worker is not None:
            obj.__dict__["_grain_worker"] = worker
        return obj

    def _assert_not_closed(self) -> None:
        if self._closed:
            raise ValueError(f"Trying to advance a closed iterator: '{self}'.")
