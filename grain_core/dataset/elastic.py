"""Elastic restore: a state saved with ``K`` ``mp_prefetch`` workers (or ``N`` JAX processes)
restored with ``K'`` workers (or ``N'`` processes), with no element lost or repeated.

This module is the one place that knows what a state means for another worker or process count:
:func:`adapt_state` (worker counts, in process included; called by a runtime consumer's
``set_state`` and by checkpoint restore) and :func:`process_state` (process counts; checkpoint files
only read the per-process states and call it). A runtime's consumer takes part through the
:class:`ElasticSource` hook (``elastic_target()``). It belongs to the dataset kernel: it reads
dataset trees and iterator states only, and the runtime's consumers and the checkpoint files call it
(``grain_core.runtime.elastic`` is its old name and still works).

Where it is well defined (see ``docs/checkpointing.md``, "Elastic restore"):

* The pipeline up to ``mp_prefetch`` is one ``MapDataset`` read by ``to_iter_dataset`` followed only
  by one-to-one iterator stages (``DatasetIterator.one_to_one``: ``map``, ``random_map``,
  ``map_with_index``, ``seed``, options, thread prefetch, ``device_put``), and the ``MapDataset``
  has no ``filter`` (skipped ``None``s would break the index <-> element correspondence) unless
  ``to_iter_dataset(allow_nones=True)``. Then worker ``w`` of ``K`` returns exactly the elements of
  ``ds[w::K]`` in order, the round-robin consumer returns ``ds[0], ds[1], ...``, and a state is one
  number: how many elements of ``ds`` were consumed (a *prefix* ``[0, G)``).
* Across JAX processes the ``MapDataset`` must also be sharded as ``base[p::N]`` (``p``, ``N`` =
  ``jax.process_index()``, ``jax.process_count()``, e.g. from ``ShardByJaxProcess``) followed only by
  index-preserving ``MapDataset`` stages (``MapDataset.one_to_one``). Process ``p``'s ``G_p``
  consumed elements are ``base[p], base[p + N], ...``; when the union over processes is a prefix of
  ``base`` (processes read in lockstep, or up to the end of their shards), a new process ``p'`` of
  ``N'`` continues its shard ``base[p'::N']`` just after that prefix.

Everything else is refused with :class:`grain_core.state.StateMismatchError` (or, for processes,
``CheckpointProcessCountError``) saying which stage makes it undefined.

Saved states are verified, not trusted: each saved ``to_iter_dataset`` fingerprint is recomputed for
the saved shard / worker slice from this pipeline's own ``MapDataset`` (:func:`map_fingerprint_parts`)
and every other stage is compared with :func:`grain_core.state.check_same_pipeline`.

Counters of one-to-one stages (``random_map``'s ``count``) are set to the new worker's local
position, so from the restore on, the elements (and their randomness) are those an uninterrupted run
with the new worker count would produce at that point. Elements before the restore were produced
with the old count; the *set* of elements over the epoch is exact either way.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from grain_core import state as _state
from grain_core.dataset.fingerprints import map_fingerprint_parts
from grain_core.dataset.map_ops import FilterMapDataset, SliceMapDataset
from grain_core.dataset.prefetch import PrefetchDatasetIterator, PrefetchIterDataset
from grain_core.dataset.trees import dataset_tree, iterator_tree

__all__ = [
    "ElasticSource",
    "ElasticTarget",
    "adapt_state",
    "NotElasticError",
    "ProcessCountRefused",
    "chain_problem",
    "consumed_prefix",
    "elastic_target",
    "leaf_state",
    "prefix_length",
    "process_shard",
    "process_state",
    "restore_state",
    "shard_parts",
    "split_prefix",
    "state_at",
    "worker_target",
]

LEAF_KIND = "PrefetchDatasetIterator"
MP_KIND = "MultiprocessPrefetchDatasetIterator"
_ADVICE = (
    " Move the stage after mp_prefetch (stages after it are restored as they are), or restore with "
    "the worker / process count the state was saved with."
)


class NotElasticError(_state.StateMismatchError):
    """Elastic restore is not defined for this pipeline or this state (the message says why)."""


class ProcessCountRefused(Exception):
    """An iterator's own ``state_for_process_count`` refused the process count (message: why)."""


def _error(msg: str) -> _state.StateMismatchError:
    return NotElasticError(msg)


# --- index arithmetic --------------------------------------------------------------------------------


def split_prefix(total: int, streams: int) -> list[int]:
    """How many of the first ``total`` indices fall in each stream ``s`` (indices ``s, s+S, ...``)."""
    return [max(0, -(-(total - s) // streams)) for s in range(streams)]


def prefix_length(counts: Sequence[int], what: str = "stream") -> int:
    """``G`` when streams ``s`` of ``S`` (indices ``s, s+S, ...``) that consumed ``counts[s]`` elements
    together consumed exactly the prefix ``[0, G)``; raises ``StateMismatchError`` otherwise."""
    total = sum(counts)
    if list(counts) != split_prefix(total, len(counts)):
        raise _error(
            f"The consumed elements are not a prefix of the data: per {what}, {list(counts)} "
            f"elements were consumed, but a prefix of {total} elements split over {len(counts)} "
            f"{what}s is {split_prefix(total, len(counts))}. Such a state cannot be re-split over "
            "another count; restore it with the count it was saved with."
        )
    return total


# --- fingerprints of other shards ---------------------------------------------------------------------


def _slice_parts(parts: tuple, start: int, step: int) -> tuple:
    """``map_fingerprint_parts(ds.slice(slice(start, None, step)))`` from ``parts`` of ``ds``."""
    idx = slice(start, None, step).indices(parts[1])
    return ("SliceMapDataset", len(range(*idx)), idx, (parts,))


@dataclass
class ProcessShard:
    """A ``MapDataset`` ``top`` = ``stages(base[index::count])``, ``stages`` index-preserving."""

    base: Any
    index: int
    count: int
    stages: list  # from just above the slice up to the top

    def parts(self, index: int, count: int) -> tuple:
        """Fingerprint parts of ``top`` with the slice ``base[index::count]`` instead."""
        parts = _slice_parts(map_fingerprint_parts(self.base), index, count)
        for d in self.stages:
            parts = (type(d).__name__, parts[1], tuple(d.fingerprint_fields().values()), (parts,))
        return parts


def process_shard(ds: Any, index: int, count: int) -> ProcessShard:
    """Finds ``base[index::count]`` under ``ds`` through index-preserving stages; raises
    ``StateMismatchError`` saying why when ``ds`` is not sharded that way."""
    stages = []
    d = ds
    while not isinstance(d, SliceMapDataset):
        if not getattr(type(d), "one_to_one", False) or len(d.parents) != 1:
            raise _error(
                f"Restoring on another number of processes needs the dataset read by "
                f"to_iter_dataset to be sharded as ds[process_index::process_count] followed only by "
                f"index-preserving stages (map, random_map, map_with_index, seed); {type(d).__name__} "
                "comes first. Shard with a strided slice last, e.g. "
                "ds[shard.shard_index::shard.shard_count].map(...)."
            )
        stages.append(d)
        d = d.parents[0]
    n = len(d.parents[0])
    got = tuple(d.fingerprint_fields().values())
    want = slice(index, None, count).indices(n)
    if tuple(got) != tuple(want):
        raise _error(
            f"Restoring on another number of processes needs this process's data sharded as "
            f"ds[{index}::{count}] (process {index} of {count}), but the slice nearest to "
            f"to_iter_dataset is [{got[0]}:{got[1]}:{got[2]}] of a dataset of {n} elements."
        )
    return ProcessShard(d.parents[0], index, count, stages[::-1])


def shard_parts(ds: Any) -> tuple:
    return map_fingerprint_parts(ds)


# --- what a pipeline offers --------------------------------------------------------------------------


def _map_problem(ds: Any) -> str | None:
    for d in dataset_tree(ds):
        if isinstance(d, FilterMapDataset):
            return (
                "the MapDataset read by to_iter_dataset contains a filter: the None elements it "
                "skips make a worker's output position differ from its index position, so the "
                "consumed elements cannot be re-split. Filter after mp_prefetch (or in the "
                "IterDataset after it), or use to_iter_dataset(allow_nones=True) and drop Nones "
                "after mp_prefetch."
            )
    return None


def chain_problem(it: Any) -> str | None:
    """Why elastic restore is not defined for the live iterator ``it`` (a chain of one-to-one
    iterators down to one ``to_iter_dataset`` iterator), or ``None`` when it is."""
    node = it
    while not isinstance(node, PrefetchDatasetIterator):
        name = getattr(node, "kind", "") or type(node).__name__
        if not getattr(type(node), "one_to_one", False):
            return (
                f"the stage {name} before mp_prefetch is not one-to-one (it may drop, group, split, "
                "reorder or mix elements), so the elements a worker returned do not map to a set "
                "of dataset indices."
            )
        parents = list(getattr(node, "parents", ()))
        if len(parents) != 1:
            return f"the stage {name} before mp_prefetch reads {len(parents)} parents."
        node = parents[0]
    if not node._allow_nones:
        return _map_problem(node._full_ds)
    return None


def leaf_state(state: Any, where: str = "state") -> Mapping:
    """The ``to_iter_dataset`` (``PrefetchDatasetIterator``) state at the end of the ``parent``
    chain of a single-stream state; ``StateMismatchError`` when there is none."""
    return _leaf(state, where)


def _leaf(state: Any, where: str) -> Mapping:
    node = state
    while isinstance(node, Mapping) and node.get("kind") != LEAF_KIND:
        if "parent" not in node:
            raise _error(
                f"{where}: the state of a {node.get('kind')!r} iterator does not lead to a "
                "to_iter_dataset iterator through one-to-one stages; elastic restore is not defined "
                "for the pipeline that saved it."
            )
        node = node["parent"]
    if not isinstance(node, Mapping) or "next_index" not in node:
        raise _error(f"{where}: malformed state, no to_iter_dataset position found.")
    return node


def state_at(template: Any, n: int) -> dict:
    """A copy of the single-stream (no mp) state ``template`` moved to ``n`` elements returned: the
    ``to_iter_dataset`` ``next_index`` and every one-to-one stage's ``count`` become ``n``."""
    out = copy.deepcopy(template)
    node = out
    while node.get("kind") != LEAF_KIND:
        if "count" in node:
            node["count"] = int(n)
        node = node["parent"]
    node["next_index"] = int(n)
    return out


@dataclass
class ElasticTarget:
    """What an iterator offers to an elastic restore: why it cannot take one (``problem``), its
    ``to_iter_dataset`` ``MapDataset``, a single-stream state template, and ``build(n)``: its state
    after the first ``n`` elements of that ``MapDataset``."""

    problem: str | None
    map_ds: Any
    chain_template: Any
    build: Callable[[int], Any]
    streams: int  # mp workers, 0 in process


@runtime_checkable
class ElasticSource(Protocol):
    """The hook a runtime's consumer implements (``RoundRobinConsumer`` does): what it offers an
    elastic restore. Iterators without it are single-stream chains (in process)."""

    def elastic_target(self) -> ElasticTarget: ...


def elastic_target(iterator: Any) -> ElasticTarget:
    """The :class:`ElasticTarget` of ``iterator`` (a runtime's consumer or an in-process chain)."""
    if isinstance(iterator, ElasticSource):
        return iterator.elastic_target()
    problem = chain_problem(iterator)
    leaves = [n for n in iterator_tree(iterator) if isinstance(n, PrefetchDatasetIterator)]
    current = iterator.get_state()
    return ElasticTarget(
        problem=problem,
        map_ds=leaves[0]._full_ds if leaves else None,
        chain_template=current,
        build=lambda n: state_at(current, n),
        streams=0,
    )


def worker_target(parent_ds: Any, templates: Sequence[Any], problem: str | None) -> ElasticTarget:
    """The :class:`ElasticTarget` of a round-robin consumer over ``len(templates)`` workers of the
    pipeline ``parent_ds``; ``templates[w]`` is worker ``w``'s fresh-iterator state; ``problem`` is
    why elastic restore is undefined (None: defined so far)."""
    k = len(templates)
    leaves = [d for d in dataset_tree(parent_ds) if isinstance(d, PrefetchIterDataset)]
    if problem is None and len(leaves) != 1:
        problem = f"the pipeline before mp_prefetch has {len(leaves)} to_iter_dataset stages."

    def build(g: int) -> dict[str, Any]:
        counts = split_prefix(g, k)
        return _state.make_state(
            MP_KIND,
            num_workers=k,
            next_worker=g % k,
            position=g,
            workers=[
                {"state": state_at(templates[w], counts[w]), "skip": 0, "exhausted": False}
                for w in range(k)
            ],
        )

    return ElasticTarget(
        problem=problem,
        map_ds=leaves[0].map_dataset if leaves else None,
        chain_template=templates[0],
        build=build,
        streams=k,
    )


# --- reading a saved state ---------------------------------------------------------------------------


def _chain_position(saved: Any, parts: tuple, target: ElasticTarget, where: str) -> int:
    leaf = _leaf(saved, where)
    want = _state.fingerprint(parts)
    if leaf.get("fingerprint") != want:
        raise _state.StateMismatchError(
            f"{where}: the saved to_iter_dataset fingerprint {leaf.get('fingerprint')!r} is not this "
            f"pipeline's for that shard ({want!r}): the state comes from another pipeline (other "
            "data, seed, structure or sharding)."
        )
    neutral = copy.deepcopy(saved)
    nl = _leaf(neutral, where)
    tl = _leaf(target.chain_template, "this pipeline")
    for key in ("fingerprint", "length"):
        if key in tl:
            nl[key] = tl[key]  # type: ignore[index]  # a deep copy: a dict
    _state.check_same_pipeline(target.chain_template, neutral, where=where)
    return int(leaf["next_index"])


def consumed_prefix(saved: Any, parts: tuple, target: ElasticTarget, where: str = "state") -> int:
    """How many leading elements of the ``MapDataset`` whose fingerprint parts are ``parts`` the
    saved state (``mp_prefetch`` with any worker count, or in-process) has consumed."""
    if not isinstance(saved, Mapping):
        raise TypeError(
            f"set_state expects the dict returned by get_state(), got {type(saved).__name__}."
        )
    if saved.get("kind") != MP_KIND:
        return _chain_position(saved, parts, target, where)
    if "num_workers" in saved and "workers" in saved:
        return prefix_length(_worker_counts(saved, parts, target, where), "worker")
    # A key is missing: the usual message says which. Last, after every reading above, so that the
    # state goes down to the checks of grain_core.state once.
    _state.expect_state(saved, MP_KIND, ("num_workers", "workers"))
    raise AssertionError("unreachable: expect_state refuses a lacking key")  # pragma: no cover


def _worker_counts(saved: Mapping, parts: tuple, target: ElasticTarget, where: str) -> list[int]:
    """How many elements of its share each worker of the ``mp_prefetch`` state ``saved`` returned."""
    k = int(saved["num_workers"])
    workers = saved["workers"]
    if not isinstance(workers, list) or len(workers) != k or k <= 0:
        raise _error(f"{where}: malformed {MP_KIND!r} state (num_workers={k}).")
    counts = []
    for w, entry in enumerate(workers):
        if not isinstance(entry, Mapping) or int(entry.get("skip", -1)) < 0:
            raise _error(f"{where}: malformed worker entry {entry!r}.")
        c = int(entry["skip"])
        if entry.get("state") is not None:
            c += _chain_position(
                entry["state"], _slice_parts(parts, w, k), target, f"{where}.workers[{w}].state"
            )
        counts.append(c)
    return counts


def restore_state(saved: Any, target: ElasticTarget, what: str) -> Any:
    """The state of ``target`` continuing where the single-process state ``saved`` stopped."""
    if target.problem is not None:
        raise _error(
            f"{what}: elastic restore is not defined for this pipeline: {target.problem}{_ADVICE}"
        )
    g = consumed_prefix(saved, map_fingerprint_parts(target.map_ds), target)
    return target.build(g)


def adapt_state(iterator: Any, state: Any, where: str = "This state") -> Any:
    """``state`` as ``iterator`` can take it: unchanged when it was saved with the iterator's own
    worker count, else (another ``mp_prefetch`` worker count, or in process vs. with workers) the
    state continuing exactly where ``state`` stopped. Raises :class:`NotElasticError` saying why
    when that is undefined for the pipeline; ``StateMismatchError`` for another pipeline. A state it
    cannot read as one of these (not a dict, or neither an ``mp_prefetch`` nor an in-process chain
    state) is returned unchanged: the iterator's own check (``set_state``; for a runtime's
    consumer :func:`grain_core.runtime.round_robin.read_state`) refuses it with the usual message.
    The saved state's own fields are read first and checked by :mod:`grain_core.state` last, so a
    state goes down once: here, then to the checks."""
    if not isinstance(state, Mapping):
        return state
    saved_kind = state.get("kind")
    saved = state.get("num_workers", 0) if saved_kind == MP_KIND else 0
    if isinstance(iterator, ElasticSource):
        k = iterator.num_workers  # type: ignore[attr-defined]
        if saved_kind == MP_KIND and saved == k:
            return state
        if saved_kind != MP_KIND and not _is_chain_state(state):
            # Neither an mp_prefetch nor an in-process chain state: another pipeline's. Handed on
            # as it is: the consumer's own check refuses it with the usual message.
            return state
        target = iterator.elastic_target()
        what = (
            f"{where} was saved with num_workers={saved} (0: in process) and is being restored "
            f"into an mp_prefetch iterator with num_workers={k}"
        )
    else:
        if saved_kind != MP_KIND:
            return state
        current = iterator.get_state()
        if isinstance(current, Mapping) and current.get("kind") == MP_KIND:
            return state  # an iterator of another kind of runtime: its set_state decides
        target = elastic_target(iterator)
        what = f"{where} was saved with mp_prefetch workers and is restored in process"
    return restore_state(state, target, what)


def _is_chain_state(state: Mapping) -> bool:
    try:
        leaf_state(state)
    except _state.StateMismatchError:
        return False
    return True


def process_state(iterator: Any, states: Sequence[Any], process_index: int, process_count: int) -> Any:
    """The state of ``iterator`` (process ``process_index`` of ``process_count``) continuing where
    the per-process ``states`` (``states[p]`` saved by process ``p`` of ``len(states)``) stopped.
    Raises :class:`NotElasticError` when re-sharding is undefined, ``StateMismatchError`` when a
    state comes from another pipeline. An iterator with a ``state_for_process_count(states,
    process_index, process_count)`` method (``ElasticIterator``) answers itself; its ``ValueError``
    becomes :class:`ProcessCountRefused`."""
    hook = getattr(iterator, "state_for_process_count", None)
    if hook is not None:
        # The hook of iterators whose state does not depend on the process (ElasticIterator): they
        # answer themselves; a ValueError is their refusal.
        try:
            return hook(states, process_index, process_count)
        except ValueError as e:
            raise ProcessCountRefused(str(e)) from e
    n = len(states)
    if any(not isinstance(s, Mapping) for s in states):
        raise NotElasticError(
            "the saved states are not iterator state dicts (e.g. a DataLoader's JSON bytes)."
        )
    target = elastic_target(iterator)
    if target.problem is not None:
        raise NotElasticError(target.problem)
    shard = process_shard(target.map_ds, process_index, process_count)
    counts = [
        consumed_prefix(states[p], shard.parts(p, n), target, f"process_{p}-of-{n}.json state")
        for p in range(n)
    ]
    total = prefix_length(counts, "process")
    return target.build(split_prefix(total, process_count)[process_index])
