"""Restoring a checkpoint written by ``N`` JAX processes on ``N'`` processes (elastic restore).

Every process reads all ``N`` files ``process_<p>-of-<N>.json``, works out which elements of the
sharded ``MapDataset`` the ``N`` processes consumed together, and continues its own new shard just
after them. Defined for pipelines described in :mod:`grain_core.runtime.elastic` whose
``to_iter_dataset`` reads ``base[process_index::process_count]`` followed only by index-preserving
stages, when the consumed elements form a prefix of ``base`` (processes stepped in lockstep, or read
their shards to the end). Anything else raises :class:`CheckpointProcessCountError` saying why; a
state of another pipeline raises :class:`CheckpointPipelineMismatchError`. See
``docs/checkpointing.md``, "Elastic restore".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grain_core.checkpoint.errors import (
    CheckpointPipelineMismatchError,
    CheckpointProcessCountError,
)
from grain_core.runtime import elastic as _elastic
from grain_core.state import StateMismatchError

__all__ = ["elastic_process_state"]


def elastic_process_state(
    iterator: Any,
    states: list[Any],
    process_index: int,
    process_count: int,
    where: str = "checkpoint",
) -> Any:
    """The state of ``iterator`` (process ``process_index`` of ``process_count``) continuing where the
    per-process ``states`` (``states[p]`` saved by process ``p`` of ``len(states)``) stopped."""
    n = len(states)
    what = (
        f"The iterator checkpoint in {where} was written by {n} JAX process(es), but this job runs "
        f"{process_count}"
    )
    hook = getattr(iterator, "state_for_process_count", None)
    if hook is not None:
        # Iterators whose state does not depend on the process (ElasticIterator) answer themselves.
        try:
            return hook(states, process_index, process_count)
        except ValueError as e:
            raise CheckpointProcessCountError(f"{what}: {e}") from e
    try:
        if any(not isinstance(s, Mapping) for s in states):
            raise _elastic.NotElasticError(
                "the saved states are not iterator state dicts (e.g. a DataLoader's JSON bytes)."
            )
        target = _elastic.elastic_target(iterator)
        if target.problem is not None:
            raise _elastic.NotElasticError(target.problem)
        shard = _elastic.process_shard(target.map_ds, process_index, process_count)
        counts = [
            _elastic.consumed_prefix(
                states[p], shard.parts(p, n), target, f"process_{p}-of-{n}.json state"
            )
            for p in range(n)
        ]
        total = _elastic.prefix_length(counts, "process")
        return target.build(_elastic.split_prefix(total, process_count)[process_index])
    except _elastic.NotElasticError as e:
        raise CheckpointProcessCountError(
            f"{what}, and re-sharding it (elastic restore) is not defined here: {e} Restore with "
            f"{n} process(es), or see docs/checkpointing.md, 'Elastic restore'."
        ) from e
    except StateMismatchError as e:
        raise CheckpointPipelineMismatchError(
            f"{what}; re-sharding it failed because it comes from a different pipeline: {e}"
        ) from e
