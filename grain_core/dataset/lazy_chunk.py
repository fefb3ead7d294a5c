"""A chunk of ``to_iter_dataset`` read element by element by the caller (the slow-element rule of
``prefetch``): each element is read when first asked for, or taken from the thread still reading
the whole chunk once that thread is done."""

from __future__ import annotations

from concurrent import futures
from typing import Any

from grain_core.dataset.base import MapDataset


class LazyChunk:
    """A chunk whose elements are read one at a time, when first asked for, by the caller.

    With ``fut`` (a thread still reading the whole chunk), elements come from its result once it
    is done. A read that fails gets a note naming the index (the error context ``mp_prefetch``
    workers give too)."""

    def __init__(self, ds: MapDataset, start: int, stop: int, fut: futures.Future | None = None):
        self._ds, self._start, self._n, self._fut = ds, start, stop - start, fut
        self._read: dict[int, Any] = {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, pos: int) -> Any:
        fut = self._fut
        if fut is not None and fut.done():
            if fut.exception() is None:
                return fut.result()[0][pos]
            self._fut = None
        if pos in self._read:
            return self._read[pos]
        index = self._start + pos
        try:
            x = self._ds.element_at(index)
        except Exception as e:
            e.add_note(f"raised while to_iter_dataset read index {index} of its MapDataset")
            raise
        self._read[pos] = x
        return x
