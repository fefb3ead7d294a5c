"""The data mode of a ``DataLoader`` state (issue 28 item 6; see docs/differences.md).

A loader's data differ between grain_core's correct mode and Grain-exact mode
(``grain_core.config.grain_exact``) only for some samplers and shards: an ``IndexSampler`` that
shuffles ``2**k + 1`` records of a shard (``k >= 16`` even), or a shard whose stream positions do
not divide evenly (``drop_remainder=False``: Grain 0.2.18 leaves the last ones unread). For those,
a loader built in correct mode records ``"data_mode": "correct"`` in its states (as dataset
stages do; a state without it there is Grain-exact's: written by google grain, by grain_core with
the switch on, or by a grain_core older than the switch), and restoring a state in the other mode
raises :class:`~grain_core.global_config.DataModeError` saying why and how to switch; nothing
changes. A ``DataLoader`` cannot switch its sampler once built, so a state written by google
grain into such a correct-mode loader is refused the same way, naming the sampler.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from grain_core import global_config as _config
from grain_core.sharding import stream_positions
from grain_core.shuffle_cipher import grain_block_is_short

__all__ = ["check_loader_state_mode", "check_grain_loader_state", "loader_mode_fields"]


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


def check_grain_loader_state(loader: Any) -> None:
    """Refuses a state written by google grain for a loader built in correct mode whose data
    differ from Grain's (a built loader cannot switch its sampler to Grain's data).

    Raises:
      DataModeError: naming the sampler and how to build the loader in Grain-exact mode.
    """
    why = None if _built_exact(loader) else _why_modes_differ(loader)
    if why is not None:
        raise _config.DataModeError(
            f"DataLoader: this state written by google grain cannot be restored: the loader was "
            f"built in grain_core's correct mode, and its sampler {loader.sampler!r} gives other "
            f"data than Grain's: {why}. A built DataLoader cannot switch its sampler. "
            f"{_config.mode_switch_hint(_config.GRAIN_EXACT_MODE)}"
        )
