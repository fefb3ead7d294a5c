"""Restoring iterator states saved by google grain (0.2.x) into the equivalent grain_core pipeline.

Grain's dataset iterators save plain dicts without a ``"kind"`` (``{"next_index": 3}`` for a
``to_iter_dataset()`` iterator and every 1:1 or batching stage above it, ``{"parent": ...,
"index_for_rng": n}`` for ``random_map``, ``{"parents": [...], "index": k, "stop": b}`` for
``IterDataset.mix``, ``{"parent": ..., "next_row": r, "counter": c}`` for the packers, and for ``mp_prefetch`` the state of the interleave over its workers:
``{"next_index_in_cycle", "next_index_in_datasets", "iterators_in_use_indices",
"iterators_in_use_states", "exhausted", "future_states"}``); its ``DataLoader`` saves ``{"version", "last_seen_indices",
"last_worker_index", "worker_count", "sampler", "data_source"}`` as JSON bytes. This module is the
one place that knows those shapes: it rewrites a Grain state into the grain_core state of the same
position, using the fresh iterator's own ``get_state()`` as the template, so every check that
``set_state`` makes still applies. ``DatasetIterator.set_state`` and ``DataLoaderIterator.set_state``
call it when they are given a Grain state; nothing else needs to.

Grain's data are Grain-exact data: a Grain state restores into a pipeline built in Grain-exact mode
(``grain_core.config.grain_exact``, on under the ``import grain`` alias), or into any pipeline
whose data the mode does not change. Restored into a ``to_iter_dataset`` iterator of a pipeline
built in correct mode whose data differ from Grain's (its stages record ``data_mode: correct``),
the translated state is marked ``from_grain`` and the iterator switches those stages to
Grain-exact mode (:mod:`grain_core.dataset.grain_exact_switch`, with a logged warning), unless
``grain_exact`` was set to False explicitly: then it is refused with
:class:`~grain_core.global_config.DataModeError` saying how to switch (:func:`check_grain_mode`).

A Grain state of a stage this module does not know raises :class:`StateMismatchError` naming the
stage, and changes nothing; a source stage below the known ones receives the Grain state itself
(so sources that read Grain's states, like ``TFRecordIterDataset``, restore them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from grain_core import global_config as _config
from grain_core.state import StateMismatchError

__all__ = [
    "FROM_GRAIN_FIELD",
    "GRAIN_DATALOADER_KEYS",
    "GRAIN_MP_PREFETCH_KEYS",
    "MP_PREFETCH_KIND",
    "check_grain_mode",
    "dataloader_mp_state",
    "dataloader_next_indices",
    "from_grain_mp_state",
    "from_grain_state",
    "is_grain_dataloader_state",
    "is_grain_mp_state",
    "is_grain_state",
]

#: The fields of a Grain ``DataLoader`` state.
GRAIN_DATALOADER_KEYS = frozenset(
    {"version", "last_seen_indices", "last_worker_index", "worker_count", "sampler", "data_source"}
)


#: The fields of the state of Grain's ``mp_prefetch`` iterator (an interleave over its workers).
GRAIN_MP_PREFETCH_KEYS = frozenset(
    {"next_index_in_cycle", "next_index_in_datasets", "iterators_in_use_states", "exhausted"}
)

#: The field of a ``to_iter_dataset`` state that continues a state written by google grain: the
#: iterator restoring it reads Grain-exact data (see the module docstring).
FROM_GRAIN_FIELD = "from_grain"

#: The ``kind`` of grain_core's ``mp_prefetch`` iterator state.
MP_PREFETCH_KIND = "MultiprocessPrefetchDatasetIterator"


def is_grain_state(state: Any) -> bool:
    """True for a state written by a Grain dataset iterator (a dict without grain_core's ``kind``)."""
    return isinstance(state, Mapping) and "kind" not in state


def is_grain_dataloader_state(state: Any) -> bool:
    """True for the (decoded) JSON state of a Grain ``DataLoaderIterator``."""
    return isinstance(state, Mapping) and GRAIN_DATALOADER_KEYS <= set(state)


def is_grain_mp_state(state: Any) -> bool:
    """True for a state written by Grain's ``mp_prefetch`` iterator (worker count > 0)."""
    return is_grain_state(state) and GRAIN_MP_PREFETCH_KEYS <= set(state)


def from_grain_state(state: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """Returns the grain_core state, shaped like ``template``, at the position Grain's ``state``
    describes.

    ``template`` is ``get_state()`` of the grain_core iterator being restored (any position).

    Raises:
      StateMismatchError: a part of ``state`` has no counterpart in the grain_core pipeline.
    """
    return _translate(state, template, "state")


def _translate(grain: Any, ours: Any, path: str) -> dict[str, Any]:
    if not isinstance(grain, Mapping):
        raise StateMismatchError(f"{path}: a Grain state must be a dict, got {type(grain).__name__}.")
    if not isinstance(ours, Mapping):
        raise StateMismatchError(
            f"{path}: this grain_core stage has no restorable position yet, so the Grain state "
            f"{dict(grain)!r} cannot be placed into it."
        )
    kind = ours.get("kind")
    if kind is None:  # a user-written (Grain-style) iterator: its state is already its own
        return dict(grain)
    if is_grain_mp_state(grain):
        if kind == MP_PREFETCH_KIND:
            # Translated by the mp_prefetch iterator itself (from_grain_mp_state): only it knows
            # the states of its workers' pipelines.
            return dict(grain)
        if not isinstance(ours.get("parent"), Mapping):
            k = len(grain.get("iterators_in_use_states") or ())
            raise StateMismatchError(
                f"{path}: this Grain state was saved by mp_prefetch with num_workers={k}, but the "
                f"grain_core pipeline reads in process here ({kind!r}). Restore it into the same "
                f"pipeline with .mp_prefetch(MultiprocessingOptions(num_workers={k}))."
            )
    if kind == "PrefetchDatasetIterator":
        if "next_index" not in grain:
            raise _unknown(grain, kind, path)
        out = {**ours, "next_index": _int(grain["next_index"], f"{path}.next_index")}
        if _correct_mode_stages(ours):
            if _config.grain_exact_opted_out():
                check_grain_mode(ours, path)
            out[FROM_GRAIN_FIELD] = True  # the iterator switches to Grain-exact data
        return out
    if kind == "RandomMapIterDataset" and "index_for_rng" in grain:
        return {
            **ours,
            "count": _int(grain["index_for_rng"], f"{path}.index_for_rng"),
            "parent": _translate(grain.get("parent"), ours.get("parent"), f"{path}.parent"),
        }
    if kind == "MixedIterDataset" and {"parents", "index"} <= set(grain):
        return _translate_mix(grain, ours, path)
    named = set(grain) - {"parent"}
    if "parent" in grain and named and named <= set(ours) and isinstance(ours.get("parent"), Mapping):
        return _translate_named(grain, ours, path)
    if isinstance(ours.get("parent"), Mapping):
        # A stage whose Grain iterator saves its parent's state as its own (map, filter, batch).
        return {**ours, "parent": _translate(grain, ours["parent"], path)}
    if "parent" not in ours and "parents" not in ours:
        # A source stage that reads Grain's state itself (e.g. TFRecordIterDataset's
        # ``{"reader_offset": n}``): hand it the Grain state; it accepts or refuses it.
        return dict(grain)
    raise _unknown(grain, kind, path)


def _translate_named(grain: Mapping[str, Any], ours: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A stage whose state uses Grain's field names next to ``parent`` (the packers'
    ``{"parent", "next_row", "counter"}``): those fields carry over, the parent's state is
    translated, and a field Grain does not save takes its initial value (0 for a count, False for
    a flag: where the stage stands right after Grain's parent state); text fields such as ``kind``
    and ``fingerprint`` stay this iterator's."""
    out: dict[str, Any] = {}
    for key, value in ours.items():
        if key == "parent":
            out[key] = _translate(grain["parent"], value, f"{path}.parent")
        elif key in grain:
            counts = isinstance(value, int) and not isinstance(value, bool)
            out[key] = _int(grain[key], f"{path}.{key}") if counts else grain[key]
        elif isinstance(value, bool):
            out[key] = False
        elif isinstance(value, int):
            out[key] = 0
        else:
            out[key] = value
    return out


def _translate_mix(grain: Mapping[str, Any], ours: Mapping[str, Any], path: str) -> dict[str, Any]:
    theirs, mine = grain["parents"], ours.get("parents")
    if not isinstance(mine, Mapping):
        raise _unknown(grain, "MixedIterDataset", path)
    if isinstance(theirs, Mapping):
        pairs = {str(k): v for k, v in theirs.items()}
    else:
        pairs = {str(i): v for i, v in enumerate(theirs)}
    if len(pairs) != len(mine) and not isinstance(theirs, Mapping):
        raise StateMismatchError(
            f"{path}: the Grain mix state has {len(pairs)} components, this mix has {len(mine)}."
        )
    parents = {
        name: (_translate(pairs[name], tmpl, f"{path}.parents[{name}]") if name in pairs else tmpl)
        for name, tmpl in mine.items()
    }
    return {
        **ours,
        "position": _int(grain["index"], f"{path}.index"),
        "exhausted": bool(grain.get("stop", False)),
        "parents": parents,
    }


def check_grain_mode(ours: Mapping[str, Any], path: str = "state") -> None:
    """Refuses a Grain-exact state (Grain's own) for the grain_core state ``ours`` when a stage
    of ``ours`` records that it was built in correct mode and gives other data than Grain's.

    Raises:
      grain_core.global_config.DataModeError: saying how to switch to Grain-exact mode.
    """
    for name in _correct_mode_stages(ours)[:1]:
        raise _config.DataModeError(
            f"{path}: this Grain state cannot be restored: the pipeline gives other data "
            f"than Grain's (at its {name} stage). "
            f"{_config.mode_switch_hint(_config.GRAIN_EXACT_MODE)}"
        )


def _correct_mode_stages(ours: Mapping[str, Any]) -> list[str]:
    """The stages of the state ``ours`` that record they were built in correct mode."""
    names = []
    for text in ours.get("stages") or ():
        try:
            stage = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(stage, Mapping) and stage.get(_config.MODE_FIELD) == _config.CORRECT_MODE:
            names.append(str(stage.get("stage")))
    return names


def _int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StateMismatchError(f"{path} must be a non-negative int in a Grain state, got {value!r}.")
    return value


def _unknown(grain: Mapping[str, Any], kind: Any, path: str) -> StateMismatchError:
    return StateMismatchError(
        f"{path}: the Grain state {dict(grain)!r} does not fit the grain_core stage {kind!r}. "
        "Grain states restore into the equivalent grain_core pipeline for to_iter_dataset() "
        "iterators and the map, filter, batch, random_map and mix stages above them; restore "
        "other Grain states by rebuilding the pipeline and skipping to the position instead."
    )


def dataloader_next_indices(
    state: Mapping[str, Any], *, worker_count: int, shard_index: int, shard_count: int
) -> list[int]:
    """Per worker, the next element index of its slice of this shard's stream, from a Grain
    ``DataLoader`` state (Grain's ``_DataLoaderStateDatasetIterator.set_state`` arithmetic).

    With no workers the single entry is the next position of this shard's stream.

    Raises:
      StateMismatchError: the state was saved with another worker count, or is malformed.
    """
    saved = state.get("worker_count")
    if saved != worker_count:
        raise StateMismatchError(
            "Worker count in checkpoint does not match dataloader worker count.\n"
            f"worker count in checkpoint: {saved}\nworker count in dataloader: {worker_count}"
        )
    seen = state["last_seen_indices"]
    if not isinstance(seen, Mapping):
        raise StateMismatchError("last_seen_indices of a Grain DataLoader state must be a dict.")
    if worker_count == 0:
        return [(_signed(seen.get("0"), "last_seen_indices['0']") + shard_count - shard_index) // shard_count]
    total = worker_count * shard_count
    return [
        (_signed(seen.get(str(w)), f"last_seen_indices['{w}']") + total - shard_index - w * shard_count)
        // total
        for w in range(worker_count)
    ]


def _signed(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateMismatchError(f"{path} must be an int in a Grain DataLoader state, got {value!r}.")
    return value


def from_grain_mp_state(state: Mapping[str, Any], templates: Sequence[Any]) -> dict[str, Any]:
    """The grain_core ``mp_prefetch`` state at the position of Grain's ``mp_prefetch`` ``state``.

    ``templates[i]`` is the fresh-iterator state of worker ``i``'s pipeline (``None`` where the
    worker could not build one: its state is then passed on as Grain wrote it, and the worker's
    own error is raised at ``next()``). Grain's workers read the same shares as ours (worker ``i``
    of ``K`` reads indices ``i::K``, or its contiguous block with ``sequential_slice=True``) and
    its output is the same round-robin, so each worker's state carries over as it is.

    Raises:
      StateMismatchError: the state was saved with another worker count (Grain cannot move such
        a state either), or is malformed.
    """
    k = len(templates)
    workers = state.get("iterators_in_use_states")
    if not isinstance(workers, Sequence) or isinstance(workers, (str, bytes)):
        raise StateMismatchError(
            "iterators_in_use_states of a Grain mp_prefetch state must be a list, got "
            f"{type(workers).__name__}."
        )
    if len(workers) != k or state.get("next_index_in_datasets") != k:
        raise StateMismatchError(
            f"This Grain mp_prefetch state was saved with num_workers={len(workers)}, but it is "
            f"being restored into mp_prefetch with num_workers={k}. A Grain state restores only "
            f"into the same worker count: build the pipeline with "
            f"MultiprocessingOptions(num_workers={len(workers)}) to restore it (then save a "
            "grain_core state, which restores elastically into other worker counts)."
        )
    exhausted = state.get("exhausted")
    if not isinstance(exhausted, Sequence) or len(exhausted) != k:
        raise StateMismatchError(f"exhausted of a Grain mp_prefetch state must list {k} flags.")
    nxt = _int(state.get("next_index_in_cycle"), "state.next_index_in_cycle")
    if nxt >= k:
        raise StateMismatchError(f"state.next_index_in_cycle={nxt} is not a worker of {k}.")
    converted = []
    for i, (grain, template) in enumerate(zip(workers, templates)):
        path = f"state.iterators_in_use_states[{i}]"
        if template is not None and not is_grain_state(template) and grain is not None:
            grain = from_grain_state(grain, template) if is_grain_state(grain) else grain
            _check_worker(grain, path)
        converted.append({"state": grain, "skip": 0, "exhausted": bool(exhausted[i])})
    return {
        "kind": MP_PREFETCH_KIND,
        "num_workers": k,
        "next_worker": nxt,
        "position": 0,
        "workers": converted,
    }


def _check_worker(state: Any, path: str) -> None:
    if not isinstance(state, Mapping):
        raise StateMismatchError(f"{path} must be a dict in a Grain mp_prefetch state.")


def dataloader_mp_state(
    state: Mapping[str, Any], *, worker_count: int, shard_index: int, shard_count: int
) -> dict[str, Any]:
    """Grain's ``mp_prefetch`` state (the form :func:`from_grain_mp_state` reads) at the position
    of a Grain ``DataLoader`` state saved with ``worker_count > 0``.

    Worker ``w`` continues at the next element of its share after ``last_seen_indices[w]`` (an
    index of the sampler; its pipeline's ``to_iter_dataset`` state is that share position), and
    the worker after ``last_worker_index`` (modulo the worker count) gives the next element.
    """
    indices = dataloader_next_indices(
        state, worker_count=worker_count, shard_index=shard_index, shard_count=shard_count
    )
    last = _signed(state.get("last_worker_index"), "last_worker_index")
    return {
        "next_index_in_cycle": (last + 1) % worker_count,
        "next_index_in_datasets": worker_count,
        "iterators_in_use_indices": list(range(worker_count)),
        "iterators_in_use_states": [{"next_index": max(0, i)} for i in indices],
        "exhausted": [0] * worker_count,
        "future_states": {},
    }
