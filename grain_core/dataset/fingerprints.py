"""Fingerprints of ``MapDataset`` chains: what a ``to_iter_dataset`` state records to refuse a
state from a different pipeline (the digest and a description per stage, which say which field of
which stage differs), and what elastic restore rebuilds for other shards."""

from __future__ import annotations

import json
import sys
from typing import Any

from grain_core import state as _state
from grain_core.dataset.base import MapDataset


def map_fingerprint_parts(ds: MapDataset) -> tuple[Any, ...]:
    """What :func:`map_fingerprint` digests: ``(class name, len, identifying fields, (parents' parts,
    ...))`` for ``ds`` and, recursively, its parents. Elastic restore builds these for other shards."""
    return (
        type(ds).__name__,
        len(ds),
        tuple(ds.fingerprint_fields().values()),
        tuple(map_fingerprint_parts(p) for p in ds.parents),
    )


def map_fingerprint(ds: MapDataset) -> str:
    """A digest of a ``MapDataset`` chain: stage classes, lengths and identifying fields."""
    return _state.fingerprint(map_fingerprint_parts(ds))


def _describe_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else repr(value)
    if len(text) > 120:  # a long source description: a readable head and a digest of the rest
        text = f"{text[:100]}...{_state.fingerprint(text)}"
    return text


def stage_descriptions(ds: MapDataset) -> list[str]:
    """One JSON string per stage of ``ds``'s ``MapDataset`` chain, ``ds`` first, depth first:
    ``{"stage": class name, "length": len (-1: infinite), **fingerprint_fields()}``.

    A ``to_iter_dataset`` state records these next to its fingerprint, so that a refused state says
    which field of which stage differs (:func:`grain_core.state.explain_stage_difference`).
    Strings, so that :func:`grain_core.state.check_same_pipeline` never compares them itself.
    """
    out: list[str] = []

    def visit(d: MapDataset) -> None:
        n = len(d)
        entry: dict[str, Any] = {"stage": type(d).__name__, "length": -1 if n >= sys.maxsize else n}
        for key, value in d.fingerprint_fields().items():
            entry[str(key)] = _describe_value(value)
        out.append(json.dumps(entry, separators=(",", ":")))
        for p in d.parents:
            if isinstance(p, MapDataset):
                visit(p)

    visit(ds)
    return out
