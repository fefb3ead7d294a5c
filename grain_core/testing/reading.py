"""Reading a dataset the way the conformance checks do: one home for building the iterator and the
reference run (elements, and the state after each) that the chunk and give-back checks compare
against."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def iterate(ds: Any) -> Any:
    """An iterator over ``ds``: a ``MapDataset`` through ``to_iter_dataset()``, else ``iter(ds)``."""
    from grain_core.dataset.base import MapDataset

    return iter(ds.to_iter_dataset() if isinstance(ds, MapDataset) else ds)


def reference_run(make_dataset: Callable[[], Any], count: int) -> tuple[list[Any], list[Any]]:
    """The first ``count`` elements of a fresh iterator read by ``next()`` (fewer at the end), and
    its state before the first and after each of them."""
    it = iterate(make_dataset())
    elements: list[Any] = []
    states = [it.get_state()]
    try:
        for x in it:
            elements.append(x)
            states.append(it.get_state())
            if len(elements) >= count:
                break
    finally:
        it.close()
    return elements, states
