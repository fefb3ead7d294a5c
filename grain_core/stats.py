"""Opt-in execution statistics: per-stage time, elements/s, prefetch buffer fill, the slowest stage.

Statistics are off unless asked for, and off costs nothing: an unmeasured iterator runs exactly
the code it runs without this module. :func:`iter_with_stats` builds a measured iterator instead of
the plain one::

    from grain_core import stats

    it = stats.iter_with_stats(ds)      # instead of iter(ds)
    for _ in range(1000):
        next(it)
    print(it.stats())                   # or stats.collect(it); a table, slowest stage named

Stages take part through the public statistics hooks of ``DatasetIterator``: ``buffer_fill()`` (a
stage with a read-ahead buffer says how full it is; sampled before each element) and
``worker_stats()`` (a stage whose parents run in worker processes returns their reports). Nothing is
read from a stage's private attributes.

How times are taken (no class of any stage is changed or replaced):

* Iterators: every ``DatasetIterator`` has the declared statistics hook ``stats_recorder``
  (``None`` by default). The kernel wraps the ``__next__`` and ``next_chunk`` of every subclass
  (kernel and plugin stages alike, :mod:`grain_core.dataset.concurrency`, the same wrapper that
  enforces one thread at a time); on a measured iterator the wrapper's outermost call goes through
  the recorder (``recorder.timed_next(fn, it)`` / ``recorder.timed_chunk(fn, it, n)``). The
  recorder waits in the guard's owner slot while no thread is inside, so the unmeasured path tests
  nothing more. :func:`iter_with_stats` builds ``iter(ds)`` and sets a recorder on each of its
  iterators (walking ``parents``), so a stage needs no code of its own to be measured.
* ``MapDataset`` stages read by ``to_iter_dataset``: stages read their parents through the element
  hooks ``parent.element_at(i)`` / ``parent.__getitems__(indices)``. :func:`iter_with_stats` reads
  a shallow copy of each such stage whose instance attribute ``element_at`` (or ``__getitems__``,
  where the class reads in bulk) times the class's method. The dataset you passed is not changed
  and plain ``iter(ds)`` on it stays unmeasured.

Stages upstream of ``mp_prefetch`` run in its worker processes: there, each worker instruments its
own copy of the pipeline the same way and sends its counters to the main process just before each
message of elements (only when statistics are on: a plain ``mp_prefetch`` iterator sends nothing
more). They appear under the ``mp_prefetch`` stage with ``workers`` set to the number of workers
that reported; their counts and times are summed over the workers (``per_worker`` has each one).

Times are inclusive (a stage's time contains the time of the stages it reads from); ``self`` time is
the inclusive time minus the inclusive times of its parents. ``MapDataset`` stages read by
``to_iter_dataset`` threads report summed thread time, which can exceed wall time. The workers run
in parallel with the main process, so an ``mp_prefetch`` stage's self time is its time minus the
mean (not the sum) of its workers' output-stage times: waiting for workers that are busy is theirs.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["PipelineStats", "StageStats", "collect", "iter_with_stats", "worker_iterator"]

_perf = time.perf_counter


@dataclasses.dataclass
class StageStats:
    """Measurements of one stage.

    Attributes:
      name: the stage label (as in ``repr(ds)``).
      kind: ``"iter"`` for an iterator stage, ``"map"`` for a ``MapDataset`` stage.
      depth: distance from the output stage.
      elements: elements the stage produced.
      calls: how many times it was called (``__next__`` or a bulk read).
      total_s: inclusive seconds.
      self_s: seconds spent in this stage itself (inclusive minus parents').
      buffer_fill: mean fraction of the prefetch buffer that was full when an element was taken,
        for stages with a buffer; else None.
      workers: for a stage run in ``mp_prefetch`` worker processes, how many workers reported (its
        counts and times are their sums); 0 for a stage of this process.
      per_worker: for such a stage, ``{"worker", "elements", "total_s"}`` of each worker; else None.
    """

    name: str
    kind: str
    depth: int
    elements: int = 0
    calls: int = 0
    total_s: float = 0.0
    self_s: float = 0.0
    buffer_fill: float | None = None
    workers: int = 0
    per_worker: list[dict[str, Any]] | None = None

    @property
    def elements_per_s(self) -> float:
        """Elements per second of this stage's own time (inf when it took no measurable time)."""
        if self.self_s <= 0:
            return float("inf") if self.elements else 0.0
        return self.elements / self.self_s

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        eps = self.elements_per_s
        d["elements_per_s"] = None if eps == float("inf") else eps
        return d


@dataclasses.dataclass
class PipelineStats:
    """A snapshot of every stage's measurements, output stage first."""

    stages: list[StageStats]
    wall_s: float

    @property
    def slowest(self) -> StageStats | None:
        """The stage with the most self time."""
        return max(self.stages, key=lambda s: s.self_s, default=None)

    def as_dict(self) -> dict[str, Any]:
        slowest = self.slowest
        return {
            "wall_s": self.wall_s,
            "slowest": slowest.name if slowest else None,
            "stages": [s.as_dict() for s in self.stages],
        }

    def __str__(self) -> str:
        rows = [("stage", "elements", "total s", "self s", "elements/s", "buffer")]
        for s in self.stages:
            eps = s.elements_per_s
            rows.append(
                (
                    "  " * s.depth
                    + s.name
                    + (" [map]" if s.kind == "map" else "")
                    + (f" [{s.workers} workers]" if s.workers else ""),
                    f"{s.elements:,}",
                    f"{s.total_s:.4f}",
                    f"{s.self_s:.4f}",
                    "-" if eps == float("inf") else f"{eps:,.0f}",
                    "-" if s.buffer_fill is None else f"{s.buffer_fill:.0%}",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in rows
        ]
        if any(s.workers for s in self.stages):
            lines.append(
                "[N workers]: runs in mp_prefetch worker processes; elements and times summed over them"
            )
        slowest = self.slowest
        lines.append(f"wall time {self.wall_s:.3f} s; slowest stage: {slowest.name if slowest else '-'}")
        return "\n".join(lines)


class _Record:
    """Mutable counters of one stage (written from the hot path, so plain attributes)."""

    __slots__ = ("name", "kind", "children", "elements", "calls", "seconds", "fill_sum", "fill_n",
                 "buffer", "remote")

    def __init__(self, name: str, kind: str):
        self.name = name
        self.kind = kind
        self.children: list[_Record] = []  # the stages this one reads from
        self.elements = 0
        self.calls = 0
        self.seconds = 0.0
        self.fill_sum = 0.0
        self.fill_n = 0
        self.buffer: Any = None  # fn() -> fill fraction, or None
        self.remote: Any = None  # fn() -> each worker's _flatten() report (or None), or None

    # The recorder protocol of ``DatasetIterator.stats_recorder``, called by the kernel's wrapper
    # of every ``__next__`` / ``next_chunk`` (grain_core.dataset.concurrency).

    def timed_next(self, fn: Any, it: Any) -> Any:
        """Runs ``fn(it)`` (the stage's own ``__next__``), recording its time and one element."""
        probe = self.buffer
        if probe is not None:
            try:
                fill = probe()
            except Exception:
                fill = None
            if fill is not None:
                self.fill_sum += fill
                self.fill_n += 1
        t0 = _perf()
        try:
            x = fn(it)
        finally:
            self.seconds += _perf() - t0
            self.calls += 1
        self.elements += 1
        return x

    def timed_chunk(self, fn: Any, it: Any, max_elements: int) -> Any:
        """Runs ``fn(it, max_elements)`` (the stage's ``next_chunk``), recording its time and the
        number of elements it returned."""
        t0 = _perf()
        try:
            out = fn(it, max_elements)
        finally:
            self.seconds += _perf() - t0
            self.calls += 1
        self.elements += len(out)
        return out


class _Collector:
    def __init__(self, root: _Record):
        self.root = root
        self.start = _perf()

    def snapshot(self) -> PipelineStats:
        stages: list[StageStats] = []
        seen: set[int] = set()

        def walk(rec: _Record, depth: int) -> None:
            if id(rec) in seen:
                return
            seen.add(id(rec))
            inner = sum(c.seconds for c in rec.children)
            remote = _aggregate(rec.remote()) if rec.remote is not None else None
            if remote:
                # The workers run in parallel with this process: subtract their mean output time.
                inner += remote[0][5] / max(remote[0][8], 1)
            stages.append(
                StageStats(
                    name=rec.name,
                    kind=rec.kind,
                    depth=depth,
                    elements=rec.elements,
                    calls=rec.calls,
                    total_s=rec.seconds,
                    self_s=max(0.0, rec.seconds - inner),
                    buffer_fill=(rec.fill_sum / rec.fill_n) if rec.fill_n else None,
                )
            )
            if remote:
                _walk_remote(remote, 0, depth + 1, stages, set())
            for c in rec.children:
                walk(c, depth + 1)

        walk(self.root, 0)
        return PipelineStats(stages, _perf() - self.start)


# --- statistics from mp_prefetch workers -----------------------------------------------------------
#
# A worker's report is its record tree flattened in preorder: one tuple per stage,
# (name, kind, child indices, elements, calls, seconds, fill_sum, fill_n).


def _flatten(root: _Record) -> list[tuple]:
    order: list[_Record] = []
    index: dict[int, int] = {}

    def visit(rec: _Record) -> None:
        if id(rec) in index:
            return
        index[id(rec)] = len(order)
        order.append(rec)
        for c in rec.children:
            visit(c)

    visit(root)
    return [
        (r.name, r.kind, [index[id(c)] for c in r.children], r.elements, r.calls, r.seconds,
         r.fill_sum, r.fill_n)
        for r in order
    ]


def worker_iterator(ds: Any) -> tuple[Any, Any]:
    """For ``mp_prefetch`` workers collecting statistics: ``(iterator, report)``, where ``report()``
    returns the iterator's counters in a small picklable form (sent to the main process)."""
    it = iter_with_stats(ds)
    collector = getattr(it, "_grain_core_stats", None)
    if collector is None:
        return it, lambda: None
    root = collector.root
    return it, lambda: _flatten(root)


def _aggregate(reports: Any) -> list[list[Any]] | None:
    """Sums the workers' reports stage by stage. Each row: name, kind, children, elements, calls,
    seconds, fill_sum, fill_n, workers, per-worker list."""
    rows: list[list[Any]] | None = None
    for w, rep in enumerate(reports or ()):
        if not rep:
            continue
        if rows is None:
            rows = [[n, k, list(c), 0, 0, 0.0, 0.0, 0, 0, []] for n, k, c, *_ in rep]
        if len(rep) != len(rows) or any(r[0] != row[0] for r, row in zip(rep, rows)):
            continue  # another pipeline shape (should not happen): not summed
        for r, row in zip(rep, rows):
            row[3] += r[3]
            row[4] += r[4]
            row[5] += r[5]
            row[6] += r[6]
            row[7] += r[7]
            row[8] += 1
            row[9].append({"worker": w, "elements": r[3], "total_s": r[5]})
    return rows


def _walk_remote(rows: list[list[Any]], i: int, depth: int, out: list[StageStats], seen: set) -> None:
    if i in seen:
        return
    seen.add(i)
    name, kind, children, elements, calls, seconds, fill_sum, fill_n, workers, per_worker = rows[i]
    inner = sum(rows[c][5] for c in children)
    out.append(
        StageStats(
            name=name,
            kind=kind,
            depth=depth,
            elements=elements,
            calls=calls,
            total_s=seconds,
            self_s=max(0.0, seconds - inner),
            buffer_fill=(fill_sum / fill_n) if fill_n else None,
            workers=workers,
            per_worker=per_worker,
        )
    )
    for c in children:
        _walk_remote(rows, c, depth + 1, out, seen)


# --- instrumentation ------------------------------------------------------------------------------


def _label(obj: Any) -> str:
    from grain_core.dataset.describe import stage_label

    try:
        return stage_label(obj)
    except Exception:
        return type(obj).__name__


def _buffer_probe(it: Any) -> Any:
    """``it.buffer_fill`` where the stage declares a buffer (it overrides
    ``DatasetIterator.buffer_fill``), else None."""
    from grain_core.dataset.iterator import DatasetIterator

    if not isinstance(it, DatasetIterator) or type(it).buffer_fill is DatasetIterator.buffer_fill:
        return None
    return it.buffer_fill


def _instrument_iterator(it: Any, seen: dict[int, _Record]) -> _Record:
    """Gives ``it`` and its parents (``parents``) a record each, set as their ``stats_recorder``:
    the kernel's wrapper of ``__next__`` / ``next_chunk`` then times every call through it."""
    if id(it) in seen:
        return seen[id(it)]
    rec = _Record(_label(it), "iter")
    seen[id(it)] = rec
    rec.buffer = _buffer_probe(it)
    worker_stats = getattr(it, "worker_stats", None)  # the hook (DatasetIterator.worker_stats)
    if worker_stats is not None and worker_stats() is not None:
        rec.remote = worker_stats
    from grain_core.dataset.iterator import DatasetIterator

    if isinstance(it, DatasetIterator):
        try:
            it.stats_recorder = rec
        except AttributeError:  # a stage with __slots__ and no stats_recorder slot: not timed
            pass
    for p in getattr(it, "parents", ()) or ():
        rec.children.append(_instrument_iterator(p, seen))
    return rec


def _instrument_map_dataset(ds: Any, rec: _Record) -> None:
    """Times the element hook of ``ds`` (a copy made for statistics): an instance attribute
    ``__getitems__`` (where the class reads in bulk) or ``element_at`` wraps the class's method.
    Stages read their parents through these attributes (``parent.element_at(i)``,
    ``parent.__getitems__(indices)``), so the wrapper sees every read."""
    from grain_core.dataset.base import MapDataset

    cls = type(ds)
    attrs = getattr(ds, "__dict__", None)
    if attrs is None:
        return
    if cls.__getitems__ is not MapDataset.__getitems__:
        many = cls.__getitems__.__get__(ds, cls)

        def getitems(indices: Any) -> Any:
            t0 = _perf()
            try:
                return many(indices)
            finally:
                rec.seconds += _perf() - t0
                rec.calls += 1
                rec.elements += len(indices)

        attrs["__getitems__"] = getitems
    else:
        one = cls.element_at.__get__(ds, cls)

        def element_at(index: int) -> Any:
            t0 = _perf()
            try:
                return one(index)
            finally:
                rec.seconds += _perf() - t0
                rec.calls += 1
                rec.elements += 1

        attrs["element_at"] = element_at


def _replace_refs(obj: Any, mapping: dict[int, Any]) -> None:
    """Points ``obj``'s attributes that reference an original parent at its copy."""

    def sub(v: Any) -> Any:
        if id(v) in mapping:
            return mapping[id(v)]
        if isinstance(v, tuple) and any(id(x) in mapping for x in v):
            return tuple(mapping.get(id(x), x) for x in v)
        if isinstance(v, list) and any(id(x) in mapping for x in v):
            return [mapping.get(id(x), x) for x in v]
        if isinstance(v, dict) and any(id(x) in mapping for x in v.values()):
            return {k: mapping.get(id(x), x) for k, x in v.items()}
        return v

    for k, v in list(vars(obj).items()):
        nv = sub(v)
        if nv is not v:
            setattr(obj, k, nv)


def _is_process_boundary(ds: Any) -> bool:
    from grain_core.runtime.multiprocess import MultiprocessPrefetchIterDataset

    return isinstance(ds, MultiprocessPrefetchIterDataset)


def _mp_with_stats(ds: Any) -> Any:
    """A copy of an ``mp_prefetch`` stage whose workers report statistics (through the runtime
    API's ``stats_hook``); ``None`` for ``num_workers=0`` (in process)."""
    if ds.multiprocessing_options.num_workers == 0:
        return None
    new = copy.copy(ds)
    new.stats_hook = worker_iterator
    return new


def _clone_map_stages(ds: Any, records: dict[int, _Record], memo: dict[int, Any]) -> Any:
    """Returns ``ds`` with every in-process ``MapDataset`` stage replaced by an instrumented copy.

    Stages that need no change are returned as they are; stages above a changed one are copied
    shallowly with their references updated.
    """
    from grain_core.dataset.base import MapDataset

    if id(ds) in memo:
        return memo[id(ds)]
    if _is_process_boundary(ds) and ds.multiprocessing_options.num_workers != 0:
        memo[id(ds)] = _mp_with_stats(ds) or ds
        return memo[id(ds)]
    if not hasattr(ds, "__dict__"):
        memo[id(ds)] = ds
        return ds
    parents = list(getattr(ds, "parents", ()) or ())
    new_parents = [_clone_map_stages(p, records, memo) for p in parents]
    changed = any(a is not b for a, b in zip(parents, new_parents))
    if not changed and not isinstance(ds, MapDataset):
        memo[id(ds)] = ds
        return ds
    new = copy.copy(ds)
    if changed:
        _replace_refs(new, {id(a): b for a, b in zip(parents, new_parents) if a is not b})
    if isinstance(ds, MapDataset):
        rec = _Record(_label(ds), "map")
        rec.children = [records[id(p)] for p in new_parents if id(p) in records]
        _instrument_map_dataset(new, rec)
        records[id(new)] = rec
    memo[id(ds)] = new
    return new


def _attach_map_records(rec: _Record, it: Any, ds_records: dict[int, _Record], seen: set) -> None:
    """Hangs the map-stage records under the iterators that read those ``MapDataset`` stages: an
    iterator holding one of the measured copies (whatever the attribute's name; matched by
    identity, the first one found) reads it."""
    if id(it) in seen:
        return
    seen.add(id(it))
    for d in getattr(it, "__dict__", {}).values():
        if id(d) in ds_records and ds_records[id(d)] not in rec.children:
            rec.children.append(ds_records[id(d)])
            break
    for p, child in zip(getattr(it, "parents", ()) or (), rec.children):
        _attach_map_records(child, p, ds_records, seen)


def iter_with_stats(ds: Iterable[Any]) -> Any:
    """Returns ``iter(ds)`` instrumented to collect per-stage statistics.

    The iterator behaves exactly like ``iter(ds)`` (same elements, ``get_state``/``set_state``) and
    has a ``stats()`` method returning a :class:`PipelineStats`; :func:`collect` does the same.
    ``ds`` itself is not modified.
    """
    ds_records: dict[int, _Record] = {}
    try:
        instrumented = _clone_map_stages(ds, ds_records, {})
    except Exception:  # an unusual stage that cannot be copied: measure the iterators only
        instrumented, ds_records = ds, {}
    it = iter(instrumented)
    seen: dict[int, _Record] = {}
    root = _instrument_iterator(it, seen)
    if root.name == type(it).__name__ and hasattr(instrumented, "parents"):
        root.name = _label(instrumented)
    _name_iterators(it, instrumented, seen)
    if ds_records:
        _attach_map_records(root, it, ds_records, set())
    collector = _Collector(root)
    try:
        it._grain_core_stats = collector  # type: ignore[attr-defined]
        it.stats = collector.snapshot  # type: ignore[attr-defined]
    except AttributeError:  # an iterator without a __dict__: stats.collect(it) cannot find it
        pass
    return it


def _name_iterators(it: Any, ds: Any, seen: dict[int, _Record]) -> None:
    """Labels iterator records with their dataset stage's label, walking both trees in step."""
    rec = seen.get(id(it))
    if rec is None:
        return
    rec.name = _label(ds)
    it_parents = list(getattr(it, "parents", ()) or ())
    ds_parents = [p for p in (getattr(ds, "parents", ()) or ())]
    from grain_core.dataset.base import IterDataset

    ds_iter_parents = [p for p in ds_parents if isinstance(p, IterDataset)]
    if len(it_parents) == len(ds_iter_parents):
        for ip, dp in zip(it_parents, ds_iter_parents):
            _name_iterators(ip, dp, seen)


def collect(it: Any) -> PipelineStats:
    """Returns the statistics of an iterator made by :func:`iter_with_stats`."""
    collector = getattr(it, "_grain_core_stats", None)
    if collector is None:
        raise ValueError(
            "This iterator collects no statistics; create it with "
            "grain_core.stats.iter_with_stats(ds) instead of iter(ds)."
        )
    return collector.snapshot()

