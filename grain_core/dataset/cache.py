"""``CacheIterDataset`` (Grain's ``grain.experimental.CacheIterDataset``): elements kept in memory.

Each iterator keeps every element it has read from its parent, in order. Once the parent is
exhausted the cache is complete: from then on positions are served from memory, and the parent is
never read again. ``set_state`` to an earlier position of a complete cache replays from memory; a
state whose cache was complete but this iterator's is not (a fresh iterator) rebuilds the cache by
re-reading the parent from its start state, as Grain does.

State: ``{"kind": "CacheIterDataset", "parent": ..., "position": int, "cache_filled": bool}``
(Grain's fields plus ``kind``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grain_core import state as _state
from grain_core.dataset.base import IterDataset
from grain_core.dataset.iterator import DatasetIterator
from grain_core.validation import check_int

__all__ = ["CacheIterDataset"]

_KIND = "CacheIterDataset"


class CacheIterDataset(IterDataset):
    """Caches the elements of ``parent`` in memory (see the module docstring)."""

    def __init__(self, parent: IterDataset):
        if not isinstance(parent, IterDataset):
            raise TypeError(
                f"CacheIterDataset needs an IterDataset parent, got {type(parent).__name__}; "
                "call .to_iter_dataset() on a MapDataset first."
            )
        super().__init__(parent)
        self._parent = parent

    def __iter__(self) -> DatasetIterator:
        return _CacheIterator(iter(self._parent))

    def __str__(self) -> str:
        return "CacheIterDataset"


class _CacheIterator(DatasetIterator):
    def __init__(self, parent: DatasetIterator):
        super().__init__(parent)
        self._parent = parent
        self._cache: list[Any] = []
        self._position = 0
        self._filled = False
        self._rebuild = False
        self._start_state = parent.get_state()

    def __next__(self) -> Any:
        if self._filled:
            if self._position < len(self._cache):
                value = self._cache[self._position]
                self._position += 1
                return value
            raise StopIteration
        if self._rebuild:
            self._parent.set_state(self._start_state)
            self._cache = []
            self._rebuild = False
            for _ in range(self._position):
                self._cache.append(next(self._parent))
        try:
            value = next(self._parent)
        except StopIteration:
            self._filled = True
            raise
        if len(self._cache) == self._position:
            self._cache.append(value)
        self._position += 1
        return value

    def get_state(self) -> dict[str, Any]:
        return _state.make_state(
            _KIND,
            parent=self._parent.get_state(),
            position=self._position,
            cache_filled=self._filled,
        )

    def set_state(self, state: Mapping[str, Any]) -> None:
        if isinstance(state, Mapping) and "kind" not in state:  # Grain's state
            state = {"kind": _KIND, **state}
        _state.expect_state(state, _KIND, ("parent", "position", "cache_filled"))
        position = check_int(state["position"], "CacheIterDataset state position")
        with _state.rollback_on_error(self):
            self._parent.set_state(state["parent"])
        if state["cache_filled"] and not self._filled:
            self._rebuild = True
        elif not self._filled and position > len(self._cache):
            self._rebuild = True
        elif not self._filled and position < len(self._cache):
            # Positions before the end of a partial cache: the parent was restored to `position`,
            # so later elements are read again and appended from there.
            del self._cache[position:]
        self._position = position
