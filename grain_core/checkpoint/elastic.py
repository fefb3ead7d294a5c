"""Restoring a checkpoint written by ``N`` JAX processes on ``N'`` processes (elastic restore).

This module only reads the files and turns errors into checkpoint errors; what the states mean for
``N'`` processes is decided by :func:`grain_core.dataset.elastic.process_state`. Every process reads all ``N`` files ``process_<p>-of-<N>.json``, works out which elements of the
sharded ``MapDataset`` the ``N`` processes consumed together, and continues its own new shard just
after them. Defined for pipelines described in :mod:`grain_core.dataset.elastic` whose
``to_iter_dataset`` reads ``base[process_index::process_count]`` followed only by index-preserving
stages, when the consumed elements form a prefix of ``base`` (processes stepped in lockstep, or read
their shards to the end). Anything else raises :class:`CheckpointProcessCountError` saying why; a
state of another pipeline raises :class:`CheckpointPipelineMismatchError`. See
``docs/checkpointing.md``, "Elastic restore".
"""

from __future__ import annotations

from typing import Any

from grain_core.checkpoint.errors import (
    CheckpointPipelineMismatchError,
    CheckpointProcessCountError,
)
from grain_core.dataset import elastic as _elastic
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
    try:
        return _elastic.process_state(iterator, states, process_index, process_count)
    except _elastic.ProcessCountRefused as e:
        raise CheckpointProcessCountError(f"{what}: {e}") from e
    except _elastic.NotElasticError as e:
        raise CheckpointProcessCountError(
            f"{what}, and re-sharding it (elastic restore) is not defined here: {e} Restore with "
            f"{n} process(es), or see docs/checkpointing.md, 'Elastic restore'."
        ) from e
    except StateMismatchError as e:
        raise CheckpointPipelineMismatchError(
            f"{what}; re-sharding it failed because it comes from a different pipeline: {e}"
        ) from e
