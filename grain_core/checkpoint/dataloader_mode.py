"""The data mode of a ``DataLoader`` state (issue 28 item 6; see docs/differences.md).

A loader's data differ between grain_core's correct mode and Grain-exact mode
(``grain_core.config.grain_exact``) only for some samplers and shards: an ``IndexSampler`` that
shuffles ``2**k + 1`` records of a shard (``k >= 16`` even), or a shard whose stream positions do
not divide evenly (``drop_remainder=False``: Grain 0.2.18 leaves the last ones unread). For those,
a loader built in correct mode records ``"data_mode": "correct"`` in its states (as dataset
stages do; a state without it there is Grain-exact's: written by google grain, by grain_core with
the switch on, or by a grain_core older than the switch), and restoring a state in the other mode
raises :class:`~grain_core.global_config.DataModeError` saying why and how to switch; nothing
changes.

A state written by google grain, restored into such a loader built in correct mode, switches the
iterator restoring it to Grain-exact data (as ``to_iter_dataset`` iterators switch, see
:mod:`grain_core.dataset.grain_exact_switch`): :func:`grain_exact_loader` is a copy of the loader
whose sampler is rebuilt in Grain-exact mode (same constructor arguments, same ``repr``), the
iterator continues on it with Grain's data and logs a warning. Its states record
``"from_grain": true`` and switch a fresh iterator of the correct-mode loader the same way. With
``grain_exact`` set to False explicitly, such a state is refused with ``DataModeError`` naming the
sampler; so is a sampler that cannot be rebuilt (one whose constructor arguments are not its
``_<name>`` attributes).
"""

from __future__ import annotations

import copy
import inspect
import logging
import sys
from collections.abc import Mapping
from typing import Any

from grain_core import global_config as _config
from grain_core.sharding import stream_positions
from grain_core.shuffle_cipher import grain_block_is_short

__all__ = [
    "FROM_GRAIN_FIELD",
    "check_grain_loader_state",
    "check_loader_state_mode",
    "grain_exact_loader",
    "loader_mode_fields",
]

_log = logging.getLogger(__name__)

#: The field of a ``DataLoader`` state saying it continues a state written by google grain.
FROM_GRAIN_FIELD = "from_grain"


def _built_exact(loader: Any) -> bool:
    exact = getattr(loader.sampler, "_grain_exact", None)
    return bool(getattr(loader, "_built_grain_exact", False) if exact is None else exact)


def _why_modes_differ(loader: Any) -> str | None:
    """Why the loader's data differ between the two modes (None: they do not)."""
    sampler, so = loader.sampler, loader._shard_options
    index_sampler = all(hasattr(sampler, a) for a in ("_num_records", "_size", "_shard_options"))
    if index_sampler:
        if getattr(sampler, "_shuffle", False) and grain_block_is_short(max(sampler._size - 1, 0)):
            return f"it shuffles {sampler._size} records (Grain repeats one and drops one)"
        sso = sampler._shard_options
        epochs = sampler._num_epochs
        if epochs is not None and sso.shard_count > 1 and not sso.drop_remainder:
            if sampler._num_records % sso.shard_count:
                return "its shards are uneven (Grain leaves records of this shard unread)"
        totals = {len(sampler)}
    else:
        try:
            totals = {len(sampler)}
        except TypeError:
            return None
    for total in totals:
        if total >= sys.maxsize:
            continue
        args = (total, so.shard_index, so.shard_count)
        if stream_positions(*args, True, so.drop_remainder) != stream_positions(
            *args, False, so.drop_remainder
        ):
            return (
                f"shard {so.shard_index} of {so.shard_count} reads an uneven share of its "
                f"{total} positions (Grain leaves the last unread)"
            )
    return None


def loader_mode_fields(loader: Any) -> dict[str, str]:
    """``{"data_mode": "correct"}`` for a loader built in correct mode whose data differ from
    Grain's, else ``{}``: what its states record."""
    if _built_exact(loader):
        return {}
    return _config.mode_fields(False, _why_modes_differ(loader) is not None)


def check_loader_state_mode(loader: Any, state: Mapping[str, Any]) -> None:
    """Refuses a grain_core ``DataLoader`` state written in the other mode than ``loader``'s where
    the two modes give different data.

    Raises:
      DataModeError: saying why and how to switch.
    """
    why = _why_modes_differ(loader)
    if why is None:
        return
    saved = state.get(_config.MODE_FIELD, _config.GRAIN_EXACT_MODE)
    mine = _config.GRAIN_EXACT_MODE if _built_exact(loader) else _config.CORRECT_MODE
    if saved != mine:
        raise _config.DataModeError(
            f"DataLoader: this state was written in {saved} mode, but this loader was built in "
            f"{mine} mode, and its sampler {loader.sampler!r} gives other data in the two modes: "
            f"{why}. {_config.mode_switch_hint(saved)}"
        )


def _refuse_grain_state(loader: Any, why: str, reason: str) -> _config.DataModeError:
    return _config.DataModeError(
        f"DataLoader: this state written by google grain cannot be restored: the loader was "
        f"built in grain_core's correct mode, and its sampler {loader.sampler!r} gives other "
        f"data than Grain's: {why}. {reason} "
        f"{_config.mode_switch_hint(_config.GRAIN_EXACT_MODE)}"
    )


def check_grain_loader_state(loader: Any) -> None:
    """Refuses a state written by google grain for a loader built in correct mode whose data
    differ from Grain's, when ``grain_exact`` was set to False explicitly.

    Raises:
      DataModeError: naming the sampler and how to build the loader in Grain-exact mode.
    """
    why = None if _built_exact(loader) else _why_modes_differ(loader)
    if why is not None and _config.grain_exact_opted_out():
        raise _refuse_grain_state(loader, why, "grain_exact was set to False explicitly.")


def _rebuilt_sampler(sampler: Any) -> Any:
    """``sampler`` built again in Grain-exact mode from its ``_<argument>`` attributes, or None."""
    if getattr(sampler, "_grain_exact", None) is None:
        return None
    try:
        params = inspect.signature(type(sampler).__init__).parameters
    except (TypeError, ValueError):
        return None
    kwargs = {}
    for name, param in params.items():
        if name == "self":
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or not hasattr(
            sampler, "_" + name
        ):
            return None
        kwargs[name] = getattr(sampler, "_" + name)
    try:
        with _config.config.override(grain_exact=True):
            new = type(sampler)(**kwargs)
    except Exception:
        return None
    return new if repr(new) == repr(sampler) and new._grain_exact else None


def grain_exact_loader(loader: Any) -> Any:
    """The loader a state written by google grain (or continuing one) is read with: ``loader``
    itself when its data are Grain's already (built in Grain-exact mode, or the modes agree);
    else a copy of it with its sampler rebuilt in Grain-exact mode and a warning logged.

    Raises:
      DataModeError: ``grain_exact`` was set to False explicitly, or the sampler cannot be rebuilt
        (both naming the sampler and how to build the loader in Grain-exact mode).
    """
    why = None if _built_exact(loader) else _why_modes_differ(loader)
    if why is None:
        return loader
    check_grain_loader_state(loader)
    sampler = _rebuilt_sampler(loader.sampler)
    if sampler is None:
        raise _refuse_grain_state(
            loader, why, "Its sampler cannot be rebuilt in Grain-exact mode by grain_core."
        )
    exact = copy.copy(loader)
    exact._sampler = sampler
    exact._built_grain_exact = True
    exact._grain_original = loader  # a correct-mode state of the loader as built switches back
    with _config.config.override(grain_exact=True):
        exact._dataset = exact._build(exact.data_source)
    _log.warning(
        "Restoring a state written by google grain: this DataLoader was built in grain_core's "
        "correct mode, where its sampler %r gives other data than Grain 0.2.18 (%s); this "
        "iterator now reads it in Grain-exact mode (Grain's data, its repeats and drops "
        "included), so training continues with the data Grain would have given. To keep correct "
        "mode and refuse Grain's states instead, set grain_core.config.update('grain_exact', "
        "False) (or GRAIN_CORE_GRAIN_EXACT=0) explicitly.",
        loader.sampler, why,
    )
    return exact
