"""Restoring iterator states saved by google grain (0.2.x) into the equivalent grain_core pipeline.

Grain's dataset iterators save plain dicts without a ``"kind"`` (``{"next_index": 3}`` for a
``to_iter_dataset()`` iterator and every 1:1 or batching stage above it, ``{"parent": ...,
"index_for_rng": n}`` for ``random_map``, ``{"parents": [...], "index": k, "stop": b}`` for
``IterDataset.mix``); its ``DataLoader`` saves ``{"version", "last_seen_indices",
"last_worker_index", "worker_count", "sampler", "data_source"}`` as JSON bytes. This module is the
one place that knows those shapes: it rewrites a Grain state into the grain_core state of the same
position, using the fresh iterator's own ``get_state()`` as the template, so every check that
``set_state`` makes still applies. ``DatasetIterator.set_state`` and ``DataLoaderIterator.set_state``
call it when they are given a Grain state; nothing else needs to.

A Grain state of a stage this module does not know raises :class:`StateMismatchError` naming the
stage, and changes nothing; a source stage below the known ones receives the Grain state itself
(so sources that read Grain's states, like ``TFRecordIterDataset``, restore them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grain_core.state import StateMismatchError

__all__ = [
    "GRAIN_DATALOADER_KEYS",
    "dataloader_next_indices",
    "from_grain_state",
    "is_grain_dataloader_state",
    "is_grain_state",
]

#: The fields of a Grain ``DataLoader`` state.
GRAIN_DATALOADER_KEYS = frozenset(
    {"version", "last_seen_indices", "last_worker_index", "worker_count", "sampler", "data_source"}
)


def is_grain_state(state: Any) -> bool:
    """True for a state written by a Grain dataset iterator (a dict without grain_core's ``kind``)."""
    return isinstance(state, Mapping) and "kind" not in state


def is_grain_dataloader_state(state: Any) -> bool:
    """True for the (decoded) JSON state of a Grain ``DataLoaderIterator``."""
    return isinstance(state, Mapping) and GRAIN_DATALOADER_KEYS <= set(state)


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
    if kind == "PrefetchDatasetIterator":
        if "next_index" not in grain:
            raise _unknown(grain, kind, path)
        return {**ours, "next_index": _int(grain["next_index"], f"{path}.next_index")}
    if kind == "RandomMapIterDataset" and "index_for_rng" in grain:
        return {
            **ours,
            "count": _int(grain["index_for_rng"], f"{path}.index_for_rng"),
            "parent": _translate(grain.get("parent"), ours.get("parent"), f"{path}.parent"),
        }
    if kind == "MixedIterDataset" and {"parents", "index"} <= set(grain):
        return _translate_mix(grain, ours, path)
    if isinstance(ours.get("parent"), Mapping):
        # A stage whose Grain iterator saves its parent's state as its own (map, filter, batch).
        return {**ours, "parent": _translate(grain, ours["parent"], path)}
    if "parent" not in ours and "parents" not in ours:
        # A source stage that reads Grain's state itself (e.g. TFRecordIterDataset's
        # ``{"reader_offset": n}``): hand it the Grain state; it accepts or refuses it.
        return dict(grain)
    raise _unknown(grain, kind, path)


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
