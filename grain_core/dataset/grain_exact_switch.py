"""A state written by google grain switches the ``to_iter_dataset`` iterator restoring it to
Grain-exact data.

Google grain's states carry Grain 0.2.18's data (its data bugs included). When such a state is
restored into a ``to_iter_dataset()`` iterator of a pipeline built in grain_core's correct mode
whose data differ from Grain's (stages recording ``data_mode: correct``), the iterator switches:
it reads a copy of its ``MapDataset`` graph in which every such stage is built in Grain-exact
mode, so it continues with the data Grain would have given, and logs a warning saying so. The
datasets the user built are not changed (other iterators of them keep correct mode).

The iterator's states record the switch (``from_grain: true``): such a state switches a fresh
iterator of the same correct-mode pipeline too, and a correct-mode state of the pipeline as built
switches the iterator back. Opting out: with ``grain_core.config.update("grain_exact", False)``
(or ``GRAIN_CORE_GRAIN_EXACT=0``) set explicitly when the state is restored, the Grain state is
refused with :class:`grain_core.global_config.DataModeError` instead
(:func:`grain_core.grain_states.from_grain_state`).

Switching is sound for a stage when its Grain-exact copy reads the same parents: the kernel's
``ShuffleMapDataset`` and ``SliceMapDataset``, and any stage defining ``_as_grain_exact()`` (a
copy of itself, on the same parents, built in Grain-exact mode). A stage that records correct
mode and offers neither is refused with ``DataModeError`` naming it; stages above switched ones
are copied with their parents replaced (a stage holding cached elements of its parent is refused).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from grain_core import global_config as _config
from grain_core.dataset.base import MapDataset
from grain_core.dataset.fingerprints import map_fingerprint
from grain_core.dataset.map_ops import ShuffleMapDataset, SliceMapDataset
from grain_core.grain_states import FROM_GRAIN_FIELD

__all__ = ["Switch", "grain_exact_copy", "pipeline_for_state"]

_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Switch:
    """The dataset a ``to_iter_dataset`` iterator reads after restoring ``state``."""

    ds: MapDataset
    fingerprint: str
    state: dict[str, Any]
    from_grain: bool


def _records_correct_mode(ds: MapDataset) -> bool:
    try:
        fields = ds.fingerprint_fields()
    except Exception:
        return False
    return isinstance(fields, Mapping) and fields.get(_config.MODE_FIELD) == _config.CORRECT_MODE


def _exact_stage(stage: MapDataset) -> MapDataset | None:
    """A Grain-exact copy of ``stage`` on the same parents, or None when it is not switchable."""
    if isinstance(stage, ShuffleMapDataset) and not stage._grain_exact:
        new = copy.copy(stage)
        new._grain_exact = True
        new._perm_cache = None
        return new
    if isinstance(stage, SliceMapDataset) and not stage._grain_exact:
        piece = copy.copy(stage)
        piece._grain_exact = True
        piece._epoch_stride = piece._n
        return piece
    hook = getattr(stage, "_as_grain_exact", None)
    if callable(hook):
        new = hook()
        if not isinstance(new, MapDataset):
            raise TypeError(f"{type(stage).__name__}._as_grain_exact() must return a MapDataset.")
        return new
    return None


def _with_parents(stage: MapDataset, old: tuple[Any, ...], new: tuple[Any, ...]) -> MapDataset:
    """A shallow copy of ``stage`` reading ``new`` where it read ``old`` (same positions)."""
    swap = {id(o): n for o, n in zip(old, new) if o is not n}
    if any("cache" in name and value for name, value in vars(stage).items() if name != "_perm_cache"):
        raise _config.DataModeError(
            f"This Grain state cannot be restored into this correct-mode pipeline: its "
            f"{type(stage).__name__} stage holds elements read in correct mode, so it cannot be "
            f"switched to Grain's data. {_config.mode_switch_hint(_config.GRAIN_EXACT_MODE)}"
        )
    out = copy.copy(stage)
    for name, value in list(vars(out).items()):
        if id(value) in swap:
            setattr(out, name, swap[id(value)])
        elif isinstance(value, (tuple, list)) and any(id(v) in swap for v in value):
            setattr(out, name, type(value)(swap.get(id(v), v) for v in value))
    return out


def grain_exact_copy(ds: MapDataset) -> tuple[MapDataset, list[str]]:
    """``ds`` with every stage whose data differ from Grain's rebuilt in Grain-exact mode (and the
    stages above them copied onto the new ones), and the names of the switched stages; ``ds``
    itself and ``[]`` when no stage differs.

    Raises:
      DataModeError: naming a stage that records correct mode but cannot be switched.
    """
    done: dict[int, MapDataset] = {}
    switched: list[str] = []

    def visit(d: MapDataset) -> MapDataset:
        if id(d) in done:
            return done[id(d)]
        old = tuple(d.parents)
        new = tuple(visit(p) if isinstance(p, MapDataset) else p for p in old)
        out = d if all(a is b for a, b in zip(old, new)) else _with_parents(d, old, new)
        exact = _exact_stage(out) if _needs_switch(out) else None
        if exact is not None:
            switched.append(type(d).__name__)
            out = exact
        if _records_correct_mode(out):
            raise _config.DataModeError(
                f"This Grain state cannot be restored into this correct-mode pipeline: its "
                f"{type(d).__name__} stage gives other data than Grain's and cannot be switched to "
                f"Grain-exact mode once built. {_config.mode_switch_hint(_config.GRAIN_EXACT_MODE)}"
            )
        done[id(d)] = out
        return out

    result = visit(ds)
    return result, switched


def _needs_switch(d: MapDataset) -> bool:
    if isinstance(d, ShuffleMapDataset):
        return _records_correct_mode(d)
    if isinstance(d, SliceMapDataset):
        return d._leaks and not d._grain_exact
    return _records_correct_mode(d)


def pipeline_for_state(
    state: Any, current: MapDataset, built: MapDataset, current_fingerprint: str
) -> Switch | None:
    """What a ``to_iter_dataset`` iterator reading ``current`` (built as ``built``) reads after
    restoring ``state``: None to keep ``current``; a :class:`Switch` to Grain-exact data for a
    state that continues a Grain state (``from_grain``), or back to ``built`` for a state of the
    pipeline as built.

    Raises:
      DataModeError: a stage of the pipeline cannot be switched (named in the message).
    """
    if not isinstance(state, Mapping):
        return None
    if state.get(FROM_GRAIN_FIELD):
        exact, switched = grain_exact_copy(built)
        if not switched:
            return None
        if _config.grain_exact_opted_out():
            raise _config.DataModeError(
                f"This state continues one written by google grain, but grain_exact was set to "
                f"False explicitly and this pipeline's {', '.join(dict.fromkeys(switched))} "
                f"stage(s) give other data than Grain's in correct mode. "
                f"{_config.mode_switch_hint(_config.GRAIN_EXACT_MODE)}"
            )
        fingerprint = map_fingerprint(exact)
        out = dict(state)
        if state.get("fingerprint") == current_fingerprint:  # translated from Grain's own state
            out["fingerprint"] = fingerprint
        if current is built:
            _log.warning(
                "Restoring a state written by google grain: this pipeline was built in "
                "grain_core's correct mode, where its %s stage(s) give other data than Grain "
                "0.2.18; this iterator now reads them in Grain-exact mode (Grain's data, its "
                "repeats and drops included), so training continues with the data Grain would "
                "have given. To keep correct mode and refuse Grain's states instead, set "
                "grain_core.config.update('grain_exact', False) (or GRAIN_CORE_GRAIN_EXACT=0) "
                "explicitly.",
                ", ".join(dict.fromkeys(switched)),
            )
        return Switch(exact, fingerprint, out, True)
    if current is not built:
        fingerprint = map_fingerprint(built)
        if state.get("fingerprint") == fingerprint:  # a state of the pipeline as built
            return Switch(built, fingerprint, dict(state), False)
    return None
