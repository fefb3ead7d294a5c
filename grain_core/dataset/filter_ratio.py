"""The filter-ratio check of ``filter`` and ``to_iter_dataset``: Grain's warning and error when
filters drop too large a share of elements (``DatasetOptions.filter_warn_threshold_ratio`` /
``filter_raise_threshold_ratio``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from grain_core.options import DatasetOptions


class FilterRatioError(ValueError):
    """Filters dropped more elements than ``DatasetOptions.filter_raise_threshold_ratio`` allows."""


_DEFAULT_OPTIONS = DatasetOptions()
# Grain-style name kept from where the check first lived (users filter logs by it).
_log = logging.getLogger("grain_core.dataset.prefetch")


_FILTER_WARN_SECONDS = 60.0  # as Grain: the filter-ratio warning is logged at most this often


class FilterRatioCheck:
    """Counts kept and dropped elements in windows and warns or raises per ``DatasetOptions``.

    As Grain's filter check: once a window holds ``filter_check_min_elements`` elements (1000 by
    default; :meth:`record_chunk` splits chunks at window ends), the fraction dropped in
    that window is compared with the thresholds (``>=``) and the window starts again. The warning goes
    through ``logging`` (logger ``grain_core.dataset.prefetch``, level WARNING, at most once a
    minute per iterator), as Grain logs it; the error is a :class:`FilterRatioError` (a
    ``ValueError``). Both use Grain's wording (``"Transformation ... skipped ... % of the last seen
    ... elements"``).
    """

    def __init__(self, where: str):
        self._where = where
        self._seen = 0
        self._dropped = 0
        self._warned_at: float | None = None

    @staticmethod
    def window(options: DatasetOptions | None) -> int:
        """Elements in a window under ``options`` (the defaults when None)."""
        return (options or _DEFAULT_OPTIONS).filter_check_min_elements

    def record_chunk(
        self, size: int, dropped_in: Callable[[int, int], int], options: DatasetOptions | None
    ) -> int:
        """Counts ``size`` elements tested together, split at window ends so that every window
        holds exactly ``filter_check_min_elements`` elements, as in Grain: ``dropped_in(start,
        stop)`` gives how many of elements ``start:stop`` were dropped. Returns how many were
        dropped in all."""
        window = max(1, self.window(options))
        total = start = 0
        while start < size:
            stop = min(size, start + window - self._seen)
            dropped = dropped_in(start, stop)
            total += dropped
            self.record(dropped, stop - start, options)
            start = stop
        return total

    def record(self, dropped: int, seen: int, options: DatasetOptions | None) -> None:
        self._seen += seen
        self._dropped += dropped
        opts = options or _DEFAULT_OPTIONS
        if self._seen < opts.filter_check_min_elements:
            return
        seen, ratio = self._seen, self._dropped / self._seen
        self._seen = self._dropped = 0
        if opts.filter_raise_threshold_ratio is not None and ratio >= opts.filter_raise_threshold_ratio:
            raise FilterRatioError(
                f"Transformation {self._where} skipped {ratio * 100:.2f} % of the last seen "
                f"{seen} elements, at or above filter_raise_threshold_ratio="
                f"{opts.filter_raise_threshold_ratio}. Please check the filtering logic. If this is "
                "intended, store a filtered copy of the data, or raise the threshold (None disables "
                "the check) with grain.experimental.DatasetOptions in WithOptionsIterDataset."
            )
        if opts.filter_warn_threshold_ratio is None or ratio < opts.filter_warn_threshold_ratio:
            return
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < _FILTER_WARN_SECONDS:
            return
        self._warned_at = now
        _log.warning(
            "Transformation %s skipped %.2f %% of the last seen %d elements (threshold "
            "filter_warn_threshold_ratio=%s). Please check the filtering logic. Reading "
            "mostly-filtered data is slow: if this is intended, consider storing a filtered "
            "copy. To disable this check, set "
            "grain.experimental.DatasetOptions.filter_warn_threshold_ratio used in "
            "WithOptionsIterDataset to None.",
            self._where,
            ratio * 100,
            seen,
            opts.filter_warn_threshold_ratio,
        )


def nones_in(items: list[Any]) -> Callable[[int, int], int]:
    """``dropped_in`` for :meth:`FilterRatioCheck.record_chunk`: the ``None``s (elements a
    ``MapDataset.filter`` dropped) among ``items[start:stop]``."""

    def count(start: int, stop: int) -> int:
        piece = items if (start == 0 and stop == len(items)) else items[start:stop]
        return len([x for x in piece if x is None])  # (5-6 ns an element; sum(map(is_)) 14)

    return count
