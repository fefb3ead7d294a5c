"""``mp_prefetch(..., sequential_slice=True)``: each worker reads a contiguous block of the sources.

Grain's semantics: with ``K > 1`` workers, worker ``i`` runs the pipeline with every source
``MapDataset`` (a stage without parents) replaced by its block ``[start, stop)`` of
:func:`even_split` ``(len(source), i, K)``; every stage between the source and
``to_iter_dataset`` is rebuilt over that shorter input, so a ``shuffle`` permutes the worker's
block only (shuffling is per worker, not global) and a ``batch`` batches within it. The output is
the usual round-robin over the workers. With one worker nothing is sliced.

:func:`contiguous_share` rebuilds a ``MapDataset`` chain that way: a source becomes a
:class:`ContiguousShareMapDataset` (which keeps the source's seed lineage, so every seed derived
from ``ds.seed(...)`` upstream stays the same), and each stage above is constructed again with the
arguments it was first constructed with (``MapDataset`` instances record them), its parents
replaced by their rebuilt shares. A stage whose construction cannot be repeated is refused with
``ValueError`` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grain_core.dataset.base import MapDataset

__all__ = ["ContiguousShareMapDataset", "contiguous_share", "even_split"]


def even_split(length: int, index: int, count: int) -> tuple[int, int]:
    """``(start, stop)`` of part ``index`` of ``count`` contiguous parts of ``range(length)``: the
    first ``length % count`` parts get one element more (Grain's ``sharding.even_split`` without
    ``drop_remainder``)."""
    if not 0 <= index < count:
        raise ValueError(f"part {index} is not in [0, {count}).")
    per, extra = divmod(length, count)
    start = per * index + min(index, extra)
    stop = per * (index + 1) + min(index + 1, extra)
    return start, stop


class ContiguousShareMapDataset(MapDataset):
    """Elements ``[start, stop)`` of a source ``MapDataset`` (index modulo the block's length, as a
    source reads), where ``(start, stop) = even_split(len(source), index, count)``.

    It takes the source's place in the chain: its seed lineage is the source's, so stages above
    derive the same seeds as over the whole source.
    """

    def __init__(self, source: MapDataset, index: int, count: int):
        super().__init__(source)
        self._source = source
        self._start, self._stop = even_split(len(source), index, count)
        self._len = self._stop - self._start
        self._lineage = source._lineage  # the same place in the pipeline as the source

    def __len__(self) -> int:
        return self._len

    def fingerprint_fields(self) -> dict[str, Any]:
        return {"start": self._start, "stop": self._stop}

    def _empty(self) -> IndexError:
        return IndexError("This worker's sequential slice of the source is empty.")

    def element_at(self, index: int) -> Any:
        if self._len == 0:
            raise self._empty()
        return self._source.element_at(self._start + index % self._len)

    def __getitems__(self, indices: Any) -> list[Any]:
        if len(indices) == 0:
            return []
        if self._len == 0:
            raise self._empty()
        start, n = self._start, self._len
        return self._source.__getitems__([start + int(i) % n for i in indices])

    def __str__(self) -> str:
        return f"ContiguousShareMapDataset[{self._start}:{self._stop}]"


def contiguous_share(ds: MapDataset, index: int, count: int) -> MapDataset:
    """``ds`` rebuilt with every source replaced by its block ``index`` of ``count`` (see the module
    docstring). A source reached twice (a dataset mixed with itself) is replaced once.

    Raises:
      ValueError: a stage between the sources and ``ds`` cannot be rebuilt.
    """
    return _rebuild(ds, index, count, {})


def _rebuild(ds: MapDataset, index: int, count: int, memo: dict[int, MapDataset]) -> MapDataset:
    done = memo.get(id(ds))
    if done is not None:
        return done
    parents = list(ds.parents)
    if not parents:
        new: MapDataset = ContiguousShareMapDataset(ds, index, count)
    else:
        if not all(isinstance(p, MapDataset) for p in parents):
            raise ValueError(_refusal(ds, "it reads an IterDataset"))
        call = vars(ds).get("_constructor_call")
        if call is None:
            raise ValueError(_refusal(ds, "it was not created by calling its class"))
        mapping = {id(p): _rebuild(p, index, count, memo) for p in parents}
        args, kwargs = call
        named = _datasets_in(call, [])
        if len(named) == len(parents):
            # A copy of a stage (e.g. grain_core.stats' instrumented copy) keeps the constructor
            # call of the original: its datasets stand, in order, for the copy's parents.
            mapping.update({id(d): mapping[id(p)] for d, p in zip(named, parents)})
        try:
            new = type(ds)(
                *_substitute(args, mapping), **{k: _substitute(v, mapping) for k, v in kwargs.items()}
            )
        except Exception as e:
            raise ValueError(_refusal(ds, f"building it again failed ({type(e).__name__}: {e})")) from e
        if list(new.parents) != [mapping[id(p)] for p in parents]:
            raise ValueError(_refusal(ds, "its parents are not among its constructor arguments"))
    memo[id(ds)] = new
    return new


def _datasets_in(value: Any, found: list[MapDataset]) -> list[MapDataset]:
    """The ``MapDataset`` instances in ``value`` (lists, tuples, dicts), in order, each once."""
    if isinstance(value, MapDataset):
        if all(d is not value for d in found):
            found.append(value)
    elif type(value) in (list, tuple):
        for v in value:
            _datasets_in(v, found)
    elif type(value) is dict:
        for v in value.values():
            _datasets_in(v, found)
    return found


def _substitute(value: Any, mapping: Mapping[int, MapDataset]) -> Any:
    if isinstance(value, MapDataset):
        return mapping.get(id(value), value)
    if type(value) is list:
        return [_substitute(v, mapping) for v in value]
    if type(value) is tuple:
        return tuple(_substitute(v, mapping) for v in value)
    if type(value) is dict:
        return {k: _substitute(v, mapping) for k, v in value.items()}
    return value


def _refusal(ds: MapDataset, why: str) -> str:
    return (
        f"mp_prefetch(sequential_slice=True) cannot give each worker a contiguous slice of the "
        f"sources: the stage {type(ds).__name__} cannot be rebuilt over a slice ({why}). Use "
        "sequential_slice=False (strided worker slices) for this pipeline."
    )
