"""Sending a pipeline to worker processes: cloudpickle, and a note naming what cannot be pickled.

When the pipeline given to ``mp_prefetch`` (or a ``DataLoader`` with workers) cannot be pickled,
the error raised is the pickling error itself (as in Grain), with a note naming the first dataset
that cannot be pickled on its own: walking from the output stage towards the sources, the first
parent that fails to pickle is followed (the leftmost branch first, as Grain reports the first
unpicklable input of a mix) until a dataset whose parents all pickle. The note reads
``Dataset: <stage> cannot be pickled!`` (Grain's wording).
"""

from __future__ import annotations

from typing import Any

__all__ = ["dumps_pipeline", "unpicklable_dataset"]


def _pickles(obj: Any) -> bool:
    import cloudpickle

    try:
        cloudpickle.dumps(obj)
    except Exception:
        return False
    return True


def unpicklable_dataset(dataset: Any) -> Any | None:
    """The dataset that cannot be pickled although its parents can, or ``None``."""
    if _pickles(dataset):
        return None
    node = dataset
    while True:
        failing = next((p for p in getattr(node, "parents", ()) if not _pickles(p)), None)
        if failing is None:
            return node
        node = failing


def dumps_pipeline(payload: Any, dataset: Any) -> bytes:
    """``cloudpickle.dumps(payload)``; on failure, the error gets a note naming the unpicklable
    dataset of ``dataset`` (see the module docstring)."""
    import cloudpickle

    try:
        return cloudpickle.dumps(payload)
    except Exception as e:
        culprit = unpicklable_dataset(dataset)
        if culprit is not None:
            e.add_note(f"Dataset: {culprit} cannot be pickled!")
        raise
