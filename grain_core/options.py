"""Option dataclasses: threading, multiprocessing and dataset-wide options."""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
from typing import Any

import numpy as np

from grain_core.validation import check_int

__all__ = ["ReadOptions", "MultiprocessingOptions", "DatasetOptions", "ExecutionTrackingMode"]

_log = logging.getLogger(__name__)


def _non_negative_int(owner: str, name: str, value: object) -> int:
    return check_int(value, f"{owner}.{name}")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How a ``MapDataset`` is read when turned into an ``IterDataset``.

    Attributes:
      num_threads: threads reading and transforming elements ahead of the consumer; 0 reads in the
        consumer's thread.
      prefetch_buffer_size: how many elements may be read ahead of the consumer.
    """

    num_threads: int = 16
    prefetch_buffer_size: int = 500

    def __post_init__(self):
        threads = _non_negative_int("ReadOptions", "num_threads", self.num_threads)
        buffer = _non_negative_int("ReadOptions", "prefetch_buffer_size", self.prefetch_buffer_size)
        if 0 < buffer < threads:  # logged, as Grain does (0 commonly disables reading ahead)
            _log.warning(
                "prefetch_buffer_size=%s is smaller than num_threads=%s. This will limit the "
                "number of threads that can actually be used in parallel to %s, potentially "
                "hurting performance. Please set prefetch_buffer_size >= num_threads.",
                buffer,
                threads,
                buffer,
            )


@dataclasses.dataclass(frozen=True)
class MultiprocessingOptions:
    """Worker processes for ``IterDataset.mp_prefetch``.

    Attributes:
      num_workers: worker processes; 0 runs the pipeline in the calling process.
      per_worker_buffer_size: finished elements each worker may hold ahead of the consumer
        (plus the one it is producing). Small elements may run further ahead, while those ahead
        take under ``grain_core.runtime.api.AHEAD_BYTES`` (4 MiB) per worker (docs/runtime.md).
      enable_profiling: log per-worker timings.
    """

    num_workers: int = 0
    per_worker_buffer_size: int = 1
    enable_profiling: bool = False

    def __post_init__(self):
        _non_negative_int("MultiprocessingOptions", "num_workers", self.num_workers)
        size = check_int(
            self.per_worker_buffer_size, "MultiprocessingOptions.per_worker_buffer_size", minimum=None
        )
        if size <= 0:  # Grain's wording
            raise ValueError(
                f"`buffer_size` must be greater than 0, got {size} "
                "(MultiprocessingOptions.per_worker_buffer_size)."
            )


class ExecutionTrackingMode(enum.Enum):
    """Which execution statistics a pipeline collects (``DatasetOptions.execution_tracking_mode``).

    ``DISABLED`` (the default) collects none; ``STAGE_TIMING`` asks for the time each stage spends
    producing an element. grain_core's per-stage statistics are :mod:`grain_core.stats`.
    """

    DISABLED = enum.auto()
    STAGE_TIMING = enum.auto()


@dataclasses.dataclass(frozen=True)
class DatasetOptions:
    """Options that apply to a whole pipeline upstream of ``WithOptionsIterDataset``.

    Attributes:
      filter_warn_threshold_ratio: warn when filters drop more than this fraction of elements
        (checked after ``filter_check_min_elements`` elements); None disables the warning.
      filter_raise_threshold_ratio: raise instead, above this fraction; None disables it.
      filter_check_min_elements: how many elements a filter sees before the ratios are checked.
      execution_tracking_mode: Grain's switch for per-stage timing (an ``ExecutionTrackingMode``);
        accepted and validated, not acted on: grain_core's stage timings are ``grain_core.stats``.
      min_shm_size: Grain's threshold (bytes) below which arrays are copied between processes
        rather than passed through shared memory; accepted and validated, not acted on (the
        runtime's own threshold is ``grain_core.runtime.shm.INBAND_LIMIT``).
    """

    filter_warn_threshold_ratio: float | None = 0.9
    filter_raise_threshold_ratio: float | None = None
    filter_check_min_elements: int = 1000
    execution_tracking_mode: ExecutionTrackingMode = ExecutionTrackingMode.DISABLED
    min_shm_size: int = 0

    def __post_init__(self):
        if not isinstance(self.execution_tracking_mode, ExecutionTrackingMode):
            raise TypeError(
                "DatasetOptions.execution_tracking_mode must be an ExecutionTrackingMode, got "
                f"{self.execution_tracking_mode!r}."
            )
        _non_negative_int("DatasetOptions", "min_shm_size", self.min_shm_size)
        for name in ("filter_warn_threshold_ratio", "filter_raise_threshold_ratio"):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise TypeError(
                    f"DatasetOptions.{name} must be a number in [0, 1] or None, got "
                    f"{type(v).__name__} {v!r}."
                )
            if not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"DatasetOptions.{name} must be in [0, 1] or None, got {v}.")
        _non_negative_int(
            "DatasetOptions", "filter_check_min_elements", self.filter_check_min_elements
        )

    def merge(self, other: DatasetOptions | None) -> DatasetOptions:
        """Returns the options merged as in Grain: a field set explicitly here (passed to the
        constructor, even with its default value) wins, then one set explicitly in ``other``, then
        the default; the result has the fields taken from either set explicitly."""
        if other is None:
            return self
        mine, theirs = _user_set(self), _user_set(other)
        kwargs = {}
        for f in dataclasses.fields(self):
            if f.name in mine:
                kwargs[f.name] = getattr(self, f.name)
            elif f.name in theirs:
                kwargs[f.name] = getattr(other, f.name)
        return DatasetOptions(**kwargs)


def _user_set(options: DatasetOptions) -> frozenset[str]:
    """The fields given to ``options``' constructor (Grain's ``_user_set_fields``)."""
    return options.__dict__.get("_user_set_fields", frozenset())


def _record_user_set_fields(cls: type) -> None:
    """Makes ``cls``' generated ``__init__`` note which fields its caller set."""
    generated = cls.__init__  # type: ignore[misc]
    names = [f.name for f in dataclasses.fields(cls) if f.init]

    @functools.wraps(generated)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        generated(self, *args, **kwargs)
        object.__setattr__(self, "_user_set_fields", frozenset([*names[: len(args)], *kwargs]))

    cls.__init__ = __init__  # type: ignore[misc]


_record_user_set_fields(DatasetOptions)
