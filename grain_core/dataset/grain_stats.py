"""Grain's per-stage ``Stats`` objects, the ``self._stats`` of custom datasets and iterators.

Grain stages record their own statistics through ``self._stats``: ``with
self._stats.record_self_time(): ...`` around the stage's own work, ``self._stats.record_output_spec(x)``
on the element produced, ``record_bytes_consumed/produced``. Custom stages written for Grain make
the same calls, so ``self._stats`` (:mod:`grain_core.dataset.grain_attrs`) is one of:

* :class:`Stats` (Grain's default): every call returns its element unchanged and records nothing.
  A stage gets it unless statistics are on when it first reads ``self._stats``.
* :class:`ExecutionStats` when statistics are on, as in Grain: ``grain_core.config.py_debug_mode``
  is set, or (iterators) the pipeline's ``DatasetOptions.execution_tracking_mode`` is
  ``STAGE_TIMING``. It records, as Grain's execution statistics do, the elements produced and the
  nanoseconds spent per ``record_self_time`` block (plus ``offset_ns``; a block of ``num_elements``
  counts that many elements, ``0`` none), the per-element minimum and maximum, the spec of the first
  element given to ``record_output_spec`` and the bytes of the elements given to
  ``record_bytes_consumed/produced``. Its parents are the stage's parents' ``_stats``; the stage
  whose ``_stats`` no other stage's has as a parent is the output (``is_output``). Recording is
  thread-safe. ``report()`` does nothing (counters are up to date at once): the periodic logging
  of ``py_debug_mode`` is :mod:`grain_core.debug`'s, the summary is
  ``grain._src.python.dataset.dataset.get_execution_summary`` (:mod:`grain_core.compat.execution_summary`).

A pickled or copied :class:`ExecutionStats` (a dataset sent to ``mp_prefetch`` workers) arrives
with the same name and parents and empty counters, as Grain's does. None of this enters iterator
states.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["ExecutionStats", "Stats", "Timer", "make_stats", "record_next_duration_if_output"]

F = TypeVar("F", bound=Callable[..., Any])


class Stats:
    """Grain's per-stage ``Stats`` interface; this base records nothing (module docstring)."""

    @property
    def output_spec(self) -> Any:
        """The spec of the elements this stage produces, when recorded (else ``None``)."""
        return None

    @contextlib.contextmanager
    def record_self_time(self, offset_ns: int = 0, num_elements: int = 1) -> Iterator[None]:
        yield

    def record_output_spec(self, element: Any) -> Any:
        return element

    def record_bytes_consumed(self, element: Any) -> Any:
        return element

    def record_bytes_produced(self, element: Any) -> Any:
        return element

    def record_output_spec_for_batch(self, elements: Sequence[Any]) -> Sequence[Any]:
        """Records the spec of the first element of ``elements`` that is not None (a bulk read's
        result); returns ``elements`` unchanged."""
        for element in elements or ():
            if element is not None:
                self.record_output_spec(element)
                break
        return elements

    def report(self) -> None:
        """Grain reports collected statistics here; grain_core's are always up to date."""


class ExecutionStats(Stats):
    """A stage's recorded statistics (module docstring); the node fields are Grain's names."""

    def __init__(self, name: str, parents: Sequence[Stats] = (), *, is_prefetch: bool = False):
        self.name = name
        self.parents = tuple(parents)
        self.is_prefetch = is_prefetch
        self.is_output = True
        for p in self.parents:
            if isinstance(p, ExecutionStats):
                p.is_output = False
        self._lock = threading.Lock()
        self._output_spec: Any = None
        self.num_produced_elements = 0
        self.total_processing_time_ns = 0
        self.min_processing_time_ns = sys.maxsize
        self.max_processing_time_ns = 0
        self.bytes_consumed = 0
        self.bytes_produced = 0

    def __reduce__(self) -> Any:
        return _fresh, (self.name, self.parents, self.is_prefetch)

    @property
    def output_spec(self) -> Any:
        return self._output_spec

    @property
    def recorded(self) -> bool:
        """Whether the stage recorded any element or time."""
        return bool(self.num_produced_elements or self.total_processing_time_ns)

    @contextlib.contextmanager
    def record_self_time(self, offset_ns: int = 0, num_elements: int = 1) -> Iterator[None]:
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            duration = time.perf_counter_ns() - start + int(offset_ns)
            if num_elements > 0:
                per_element = duration // num_elements
                with self._lock:
                    self.num_produced_elements += num_elements
                    self.total_processing_time_ns += duration
                    self.min_processing_time_ns = min(self.min_processing_time_ns, per_element)
                    self.max_processing_time_ns = max(self.max_processing_time_ns, per_element)

    def record_output_spec(self, element: Any) -> Any:
        if self._output_spec is None:
            from grain_core.tree import spec_like

            self._output_spec = spec_like(element)
        return element

    def record_bytes_consumed(self, element: Any) -> Any:
        from grain_core.tree import nbytes

        size = nbytes(element)
        with self._lock:
            self.bytes_consumed += size
        return element

    def record_bytes_produced(self, element: Any) -> Any:
        from grain_core.tree import nbytes

        size = nbytes(element)
        with self._lock:
            self.bytes_produced += size
        return element


def _fresh(name: str, parents: Sequence[Stats], is_prefetch: bool) -> ExecutionStats:
    return ExecutionStats(name, parents, is_prefetch=is_prefetch)


def stats_enabled(owner: Any) -> bool:
    """Whether ``owner``'s ``_stats`` records: ``py_debug_mode`` on, or ``owner``'s options (an
    iterator's) ask for ``STAGE_TIMING``."""
    from grain_core.global_config import config
    from grain_core.options import ExecutionTrackingMode

    if config.py_debug_mode:
        return True
    options = getattr(owner, "options", None)
    mode = getattr(options, "execution_tracking_mode", None)
    return mode is ExecutionTrackingMode.STAGE_TIMING


def make_stats(owner: Any, default: Stats) -> Stats:
    """``owner._stats`` when first read: an :class:`ExecutionStats` named ``str(owner)`` over its
    parents' ``_stats`` when :func:`stats_enabled`, else ``default``."""
    if not stats_enabled(owner):
        return default
    parents = [getattr(p, "_stats", default) for p in getattr(owner, "_parents", ())]
    kind = type(owner).__name__
    try:
        name = str(owner)
    except Exception:
        name = kind
    if name.startswith("<"):  # object's default: the class is the useful part
        name = kind
    return ExecutionStats(name, parents, is_prefetch="Prefetch" in kind)


class Timer:
    """Grain's ``stats.Timer``: a context manager adding the nanoseconds spent inside it."""

    def __init__(self) -> None:
        self._total = 0
        self._start: int | None = None

    def __enter__(self) -> Timer:
        self._start = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._start is not None:
            self._total += time.perf_counter_ns() - self._start
            self._start = None

    def value(self) -> int:
        """Nanoseconds measured so far."""
        return self._total

    def reset(self) -> None:
        self._total = 0


def record_next_duration_if_output(next_fn: F) -> F:
    """Grain's decorator for ``__next__``; here it returns the method's result unchanged (the time
    of the output stage is measured by :mod:`grain_core.stats`)."""

    @functools.wraps(next_fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return next_fn(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
