"""Restoring a ``DataLoader`` state on another worker count, batches per worker included.

With ``worker_count = K > 0`` worker ``w`` reads the positions ``w, w + K, w + 2K, ...`` of the
loader's stream (the ``MapDataset`` of sampler positions and leading one-to-one operations) and
batches them itself, so after a few batches the positions consumed are *not* a prefix of the stream:
``range(16)``, ``Batch(4)``, 2 workers, 3 batches returned consumed ``{0..8, 10, 12, 14}``. What is
known exactly is each worker's consumed share (``c_w`` positions of its slice), so the rest is too:

* :class:`Remaining` names the positions still to read: the *holes* (sorted positions below
  ``tail`` not consumed) then every position from ``tail`` on. A fresh loader reads
  ``Remaining((), 0)``: the whole stream.
* A state of ``K`` workers (or of one process, ``K = 0``) over ``Remaining`` ``R`` consumed, in the
  order ``u`` of ``R``'s positions, the indices ``w + K j`` for ``j < c_w`` (``[0, c)`` in process).
  :meth:`Remaining.after` turns that into the positions still to read, and the restored loader
  (``K'`` workers, ``0`` included) reads them as a fresh stream: worker ``w'`` reads ``u'[w'::K']``
  and batches them. No position is read twice or skipped (exactly once); the loader's state then
  carries ``"remaining"``, and a later restore composes.
* ``c_w`` comes from the worker's saved state: its ``to_iter_dataset`` position after replaying, in
  this process, the elements the state says to skip after it (``skip``), with the pipeline of the
  saved worker count and ``Remaining`` (which also verifies the state belongs to this pipeline).

Defined when every stage between the stream and the workers' hand-off holds no part of a record
across ``next()`` calls: the ``DataLoader`` operations ``Map``, ``RandomMap``, ``MapWithIndex``,
``Filter`` and ``Batch``. Refused (:class:`grain_core.dataset.elastic.NotElasticError`, saying
which) for a ``FlatMap`` (a worker may stop inside the elements of one record) and for custom
legacy ``Operation``\\ s (a function over the record iterator: its state says nothing of the
records it consumed). Known limits: ``Batch(drop_remainder=True)`` drops each worker's last
incomplete batch, so *which* records are dropped depends on the worker count (never a repeat);
``RandomMap`` / ``MapWithIndex`` placed *after* a ``Batch`` count batches from 0 again on each new
worker. See ``docs/dataloader.md``, "State".
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from grain_core import state as _state
from grain_core import transforms as tr
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.elastic import MP_KIND, NotElasticError, leaf_state
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.sharing import worker_share
from grain_core.operations import is_custom_operation

__all__ = ["Remaining", "RemainingMapDataset", "plan", "refusal", "restored_remaining"]

#: The most holes a ``"remaining"`` field may list (a state written by ``get_state()`` holds at
#: most about ``worker_count x`` a worker's read-ahead of positions; this only bounds bad input).
MAX_HOLES = 1 << 24


@dataclass(frozen=True)
class Remaining:
    """The stream positions still to read, in order: ``holes`` (sorted, distinct, each below
    ``tail``) then every position from ``tail`` on."""

    holes: tuple[int, ...] = ()
    tail: int = 0

    @property
    def is_whole(self) -> bool:
        """True for the whole stream (a fresh loader)."""
        return not self.holes and self.tail == 0

    def size(self, n: int) -> int:
        """How many positions of a stream of ``n`` are still to read."""
        return len(self.holes) + max(0, n - self.tail)

    def positions(self, order: np.ndarray) -> np.ndarray:
        """The stream positions of the ``order``-th remaining positions (int64, each ``< size``)."""
        order = np.asarray(order, dtype=np.int64)
        h = len(self.holes)
        if not h:
            return order + self.tail
        holes = np.asarray(self.holes, dtype=np.int64)
        return np.where(order < h, holes[np.minimum(order, h - 1)], order - h + self.tail)

    def position(self, order: int) -> int:
        """The stream position of the ``order``-th remaining position."""
        h = len(self.holes)
        return self.holes[order] if order < h else self.tail + order - h

    def after(self, counts: Sequence[int], workers: int, n: int) -> Remaining:
        """The positions still to read once ``workers`` workers consumed ``counts[w]`` positions of
        their slices ``u[w::workers]`` of this order ``u`` (``workers=1``: the first ``counts[0]``)."""
        size = self.size(n)
        ends = [w + workers * c for w, c in enumerate(counts)]
        lo = min(min(ends), size)
        hi = min(max((e - workers + 1 for e, c in zip(ends, counts) if c > 0), default=0), size)
        if hi <= 0:
            return self
        window = np.arange(lo, max(lo, hi), dtype=np.int64)
        left = window[window // workers >= np.asarray(counts, dtype=np.int64)[window % workers]]
        holes = [int(p) for p in self.positions(left)] + list(self.holes[hi:])
        return Remaining(tuple(holes), self.tail + max(0, hi - len(self.holes)))

    def wrap(self, stream: MapDataset) -> MapDataset:
        """``stream`` read in this order (``stream`` itself when this is the whole stream)."""
        return stream if self.is_whole else RemainingMapDataset(stream, self)

    def to_state(self) -> dict[str, Any]:
        return {"holes": list(self.holes), "tail": self.tail}

    @classmethod
    def from_state(cls, value: Any, n: int) -> Remaining:
        """The ``"remaining"`` field of a ``DataLoader`` state (absent: the whole stream), checked
        against a stream of ``n`` positions."""
        if value is None:
            return cls()
        where = "DataLoaderIterator state 'remaining'"
        if not isinstance(value, Mapping) or not isinstance(value.get("holes"), list):
            raise _state.InvalidStateError(
                f"{where} must be {{'holes': [int, ...], 'tail': int}}, got {value!r}: it was not "
                "written by get_state()."
            )
        tail = _state.check_state_int(value.get("tail"), "tail", maximum=n, where=where)
        holes = value["holes"]
        if len(holes) > MAX_HOLES:
            raise _state.InvalidStateError(f"{where} lists {len(holes)} holes (at most {MAX_HOLES}).")
        prev = -1
        for h in holes:
            _state.check_state_int(h, "holes[i]", maximum=tail - 1, where=where)
            if h <= prev:
                raise _state.InvalidStateError(
                    f"{where}: holes must be increasing, got {h} after {prev}."
                )
            prev = h
        return cls(tuple(int(h) for h in holes), tail)


class RemainingMapDataset(MapDataset):
    """Element ``i`` is ``parent[remaining.position(i)]``; later epochs continue in the parent's
    later epochs (as a slice's do)."""

    def __init__(self, parent: MapDataset, remaining: Remaining):
        super().__init__(parent)
        self._parent = parent
        self._remaining = remaining
        self._n = len(parent)
        self._len = remaining.size(self._n)

    def __len__(self) -> int:
        return self._len

    def fingerprint_fields(self) -> Mapping[str, Any]:
        digest = hashlib.sha1(np.asarray(self._remaining.holes, dtype=np.int64).tobytes())
        return {
            "holes": len(self._remaining.holes),
            "holes_digest": digest.hexdigest()[:16],
            "tail": self._remaining.tail,
        }

    def element_at(self, index: int) -> Any:
        if self._len == 0:
            raise IndexError("No positions are left to read.")
        epoch, j = divmod(index, self._len)
        return self._parent.element_at(self._remaining.position(j) + epoch * self._n)

    def __getitems__(self, indices: Any) -> list[Any]:
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0:
            return []
        if self._len == 0:
            raise IndexError("No positions are left to read.")
        if self._n >= sys.maxsize and int(idx.max()) >= self._len:
            return [self.element_at(int(i)) for i in idx]
        epoch, j = np.divmod(idx, self._len)
        return self._parent.__getitems__(self._remaining.positions(j) + epoch * self._n)

    def __str__(self) -> str:
        return f"RemainingMapDataset(holes={len(self._remaining.holes)}, tail={self._remaining.tail})"


def refusal(operations: Sequence[Any], custom: bool) -> str | None:
    """Why a ``DataLoader`` with these operations cannot move to another worker count (None: it
    can)."""
    if custom:
        return (
            "its operations include a custom legacy Operation (a function over the iterator of "
            "records), whose state does not say which records it consumed"
        )
    for i, op in enumerate(operations):
        if tr.is_kind(op, tr.FlatMap):
            return (
                f"operations[{i}] is a FlatMap: it splits one record into several elements, and a "
                "worker may have stopped inside one record's elements, so what was consumed is not "
                "a set of records"
            )
    return None


@dataclass
class SavedPipeline:
    """The pipeline that wrote a state: its iterable before the workers' hand-off (``dataset``),
    the map-side batch size in process (``map_batch``, else None) and the stream's length."""

    dataset: IterDataset
    map_batch: int | None
    stream_len: int


def _position(it: DatasetIterator, state: Any, skip: int) -> int | None:
    """``it``'s ``to_iter_dataset`` position after ``state`` and ``skip`` more elements (None: the
    iterator ended while skipping)."""
    if state is not None:
        it.set_state(state)
    for _ in range(skip):
        try:
            next(it)
        except StopIteration:
            return None
    return int(leaf_state(it.get_state(), "DataLoader state")["next_index"])


def restored_remaining(
    inner: Mapping[str, Any], saved: Remaining, pipeline: SavedPipeline
) -> Remaining:
    """The positions still to read after the loader iterator state ``inner`` (its ``"iterator"``
    field, any worker count) saved over ``saved``. Raises ``StateMismatchError`` for a state of
    another pipeline."""
    size = saved.size(pipeline.stream_len)
    if inner.get("kind") != MP_KIND:
        it = iter(pipeline.dataset)
        try:
            c = _position(it, inner, 0)
        finally:
            it.close()
        assert c is not None
        if pipeline.map_batch:
            c = min(c * pipeline.map_batch, size)
        return saved.after([c], 1, pipeline.stream_len)
    _state.expect_state(inner, MP_KIND, ("num_workers", "workers"))
    k = inner["num_workers"]
    workers = inner["workers"]
    if not isinstance(k, int) or k <= 0 or not isinstance(workers, list) or len(workers) != k:
        raise _state.InvalidStateError(f"Malformed {MP_KIND!r} state: {dict(inner)!r}")
    counts = []
    for w, entry in enumerate(workers):
        if not isinstance(entry, Mapping):
            raise _state.InvalidStateError(f"Malformed worker entry {entry!r} in the state.")
        share = len(range(w, size, k))
        if entry.get("exhausted") is True:
            counts.append(share)
            continue
        skip = _state.check_state_int(entry.get("skip", 0), f"workers[{w}].skip", where=MP_KIND)
        with worker_share(w, k):
            it = iter(pipeline.dataset)
        try:
            c = _position(it, entry.get("state"), skip)
        finally:
            it.close()
        counts.append(share if c is None else c)
    return saved.after(counts, k, pipeline.stream_len)


def not_elastic(saved_workers: int, workers: int, why: str) -> NotElasticError:
    """The error for a state of ``saved_workers`` that cannot move to ``workers``, saying ``why``."""
    return NotElasticError(
        f"This state was saved by a DataLoader with worker_count={saved_workers}, and cannot be "
        f"restored into one with worker_count={workers}: {why}. Restore it with "
        f"worker_count={saved_workers} (see docs/dataloader.md, 'State')."
    )


def plan(loader: Any, read_from: Any, state: Mapping[str, Any]) -> tuple[Remaining, Any]:
    """What a ``DataLoaderIterator`` of ``loader`` (reading ``read_from``) restoring the checked
    loader ``state`` reads: ``(remaining, inner)``, where ``inner`` is the iterator state to set on
    a pipeline over ``remaining``, or None to start one fresh (the state moved to another worker
    count). Raises :class:`NotElasticError` where that move is undefined (saying why),
    ``StateMismatchError`` for a state of another pipeline."""
    n = loader._stream_len
    saved = Remaining.from_state(state.get("remaining"), n)
    inner = state["iterator"]
    saved_workers = 0
    if isinstance(inner, Mapping) and inner.get("kind") == MP_KIND:
        saved_workers = _state.check_state_int(inner.get("num_workers"), "num_workers", where=MP_KIND)
    workers = loader.worker_count
    if saved_workers == workers:
        return saved, inner
    ops = loader.operations
    why = refusal(ops, any(is_custom_operation(op) for op in ops))
    if why is not None:
        raise not_elastic(saved_workers, workers, why)
    sibling = type(loader)(
        data_source=loader.data_source,
        sampler=loader.sampler,
        operations=ops,
        worker_count=saved_workers,
        worker_buffer_size=loader.multiprocessing_options.per_worker_buffer_size,
        shard_options=loader._shard_options,
        read_options=loader.read_options,
    )
    ds = sibling._build(read_from, saved)
    if saved_workers:
        ds = ds.parents[0]  # the pipeline each worker runs, before mp_prefetch
    pipeline = SavedPipeline(ds, sibling._map_batch_size, n)
    try:
        return restored_remaining(inner, saved, pipeline), None
    except NotElasticError:
        raise
    except _state.StateMismatchError as e:
        raise _state.StateMismatchError(
            f"This state was saved by a DataLoader with worker_count={saved_workers}, and cannot be "
            f"restored into one with worker_count={workers}: {e}"
        ) from e
