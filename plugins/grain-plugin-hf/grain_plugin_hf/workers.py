"""``resplit_worker_state``: an ``mp_prefetch`` state of a ``HuggingFaceIterDataset`` saved with
``K`` workers, for ``K'`` workers (or in process).

The kernel's elastic restore covers ``to_iter_dataset`` pipelines; a streaming dataset is split by
its shards instead, and this module re-splits those. It reads only what ``get_state()`` returned:
each worker entry is ``{"state", "skip", "exhausted"}`` (the worker's iterator state and how many
of its elements after that state were consumed), which it resolves into one exact reader state by
replaying the ``skip`` elements in this process, then hands every new worker its shards with
:func:`grain_plugin_hf.resplit_states`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grain_core.author import StateMismatchError, expect_state, make_state
from grain_plugin_hf.iterable import (
    KIND,
    HuggingFaceIterator,
    HuggingFaceIterDataset,
    resplit_states,
)

__all__ = ["resplit_worker_state"]

MP_KIND = "MultiprocessPrefetchDatasetIterator"


def _reader_states(state: Mapping[str, Any], ds: HuggingFaceIterDataset) -> list[dict[str, Any]]:
    """One exact :class:`HuggingFaceIterator` state per reader that saved ``state``."""
    p, n = ds.process
    if state.get("kind") == KIND:
        return [dict(state)]
    expect_state(state, MP_KIND, ("num_workers", "workers"))
    k = int(state["num_workers"])
    workers = state["workers"]
    if not isinstance(workers, list) or len(workers) != k or k <= 0:
        raise StateMismatchError(f"resplit_worker_state: malformed {MP_KIND} state.")
    out = []
    for w, entry in enumerate(workers):
        saved = entry.get("state") if isinstance(entry, Mapping) else None
        if saved is not None and (not isinstance(saved, Mapping) or saved.get("kind") != KIND):
            kind = saved.get("kind") if isinstance(saved, Mapping) else type(saved).__name__
            raise StateMismatchError(
                f"resplit_worker_state: worker {w}'s state is a {kind!r} state: the pipeline "
                "before mp_prefetch must be HuggingFaceIterDataset alone. Put other stages after "
                "mp_prefetch (their states are kept as they are)."
            )
        it = HuggingFaceIterator(ds, reader=p + n * w, readers=n * k)
        try:
            if saved is not None:
                it.set_state(dict(saved))
            for _ in range(int(entry.get("skip", 0))):  # consumed after the worker's state
                next(it)
            out.append(it.get_state())
        except StopIteration:
            out.append(it.get_state())
        finally:
            it.close()
    return out


def resplit_worker_state(
    state: Mapping[str, Any], dataset: HuggingFaceIterDataset, num_workers: int
) -> dict[str, Any]:
    """``state`` (saved by ``dataset.mp_prefetch(...)`` with any worker count, or by the
    in-process iterator of ``dataset``) as a state for ``num_workers`` workers (``0``: the
    in-process iterator), continuing with no example lost or repeated.

    Use: ``it = iter(dataset.mp_prefetch(MultiprocessingOptions(num_workers=k2)));
    it.set_state(resplit_worker_state(saved, dataset, k2))``. ``dataset`` must be the same dataset
    with the same ``shard_options`` (for another process count, re-split per-process states with
    :func:`grain_plugin_hf.resplit_states`). The order after the restore is that of a
    ``num_workers`` run.

    Raises:
      StateMismatchError: another dataset, or stages between the source and ``mp_prefetch``.
    """
    if not isinstance(dataset, HuggingFaceIterDataset):
        raise TypeError(
            "resplit_worker_state takes the HuggingFaceIterDataset that saved the state, got "
            f"{type(dataset).__name__}."
        )
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
        raise ValueError(f"resplit_worker_state: num_workers must be an int >= 0, got {num_workers!r}.")
    if not isinstance(state, Mapping):
        raise TypeError(f"resplit_worker_state takes a get_state() dict, got {type(state).__name__}.")
    readers = _reader_states(state, dataset)
    p, n = dataset.process
    if num_workers == 0:
        return resplit_states(readers, p, n)
    return make_state(
        MP_KIND,
        num_workers=num_workers,
        next_worker=0,
        position=int(state.get("position", 0)) if state.get("kind") == MP_KIND else 0,
        workers=[
            {
                "state": resplit_states(readers, p + n * w, n * num_workers),
                "skip": 0,
                "exhausted": False,
            }
            for w in range(num_workers)
        ],
    )
