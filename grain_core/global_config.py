"""Grain's global options object (``grain.config``, here ``grain_core.config``), without absl flags.

``grain_core.config.update("py_debug_mode", True)`` sets an option, ``grain_core.config.py_debug_mode``
reads it, ``get_or_default(name)`` reads it too (there is no flag parsing, so it never fails for a
known option). The option names and defaults are Grain 0.2.18's. An unknown name raises
``ValueError`` naming the known ones; a value of the wrong type raises ``TypeError`` and changes
nothing. ``GRAIN_<NAME>`` environment variables (e.g. ``GRAIN_PY_DEBUG_MODE=1``) set an option's
starting value, read once when the module is imported.

The options are stored and returned for code written against Grain. ``py_debug_mode`` and
``py_dataset_visualization_output_dir`` act as in Grain (:mod:`grain_core.debug`: periodic per-stage
statistics, the pipeline graph); the ``tf_*`` options select TensorFlow implementations grain_core
does not have. See docs/migration.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["Config", "config", "OPTION_DEFAULTS"]

#: Every option and its default (Grain 0.2.18's ``--grain_<name>`` flags).
OPTION_DEFAULTS: Mapping[str, Any] = {
    "py_dataset_visualization_output_dir": None,
    "py_debug_mode": False,
    "py_relay_sigterm_to_main": False,
    "py_traceback_filtering": "auto",
    "tf_interleaved_shuffle": False,
    "tf_interleaved_shuffle_block_size": 10,
    "tf_interleaved_shuffle_parallel_blocks": 10,
    "tf_lookup_batch_size": 100,
    "tf_lookup_fast_warmup": False,
    "tf_lookup_num_parallel_calls": -1,
    "tf_optimized_sequential_read": False,
    "tf_prefetch_buffer_size": -1,
}

_TRACEBACK_FILTERING = ("auto", "off", "tracebackhide", "quiet_remove_frames", "remove_frames")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _check(name: str, value: Any) -> Any:
    default = OPTION_DEFAULTS[name]
    if name == "py_dataset_visualization_output_dir":
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise TypeError(
                f"config option {name!r} takes a directory path or None, got {value!r}."
            )
        return None if value is None else os.fspath(value)
    if name == "py_traceback_filtering":
        if value not in _TRACEBACK_FILTERING:
            raise ValueError(
                f"config option {name!r} must be one of {_TRACEBACK_FILTERING}, got {value!r}."
            )
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise TypeError(
                f"config option {name!r} takes a bool, got {type(value).__name__} {value!r}."
            )
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"config option {name!r} takes an int, got {type(value).__name__} {value!r}."
        )
    return value


def _from_env(name: str, raw: str) -> Any:
    default = OPTION_DEFAULTS[name]
    if isinstance(default, bool):
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ValueError(
            f"environment variable GRAIN_{name.upper()}={raw!r} is not a boolean (use 1 or 0)."
        )
    if isinstance(default, int):
        return int(raw)
    return raw


class Config:
    """Holds grain_core's global options; use the module-level ``config`` instance."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        values = dict(OPTION_DEFAULTS)
        env = os.environ if environ is None else environ
        for name in OPTION_DEFAULTS:
            raw = env.get(f"GRAIN_{name.upper()}")
            if raw is not None:
                values[name] = _check(name, _from_env(name, raw))
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_lock", threading.Lock())

    def _known(self, name: str) -> None:
        if name not in OPTION_DEFAULTS:
            raise ValueError(
                f"Unrecognized config option: {name}. Known options: {', '.join(sorted(OPTION_DEFAULTS))}."
            )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        self._known(name)
        return self._values[name]

    def get_or_default(self, name: str) -> Any:
        """The option's current value (its default unless it was updated)."""
        return self.__getattr__(name)

    def update(self, name: str, value: Any) -> None:
        """Sets option ``name`` to ``value`` (validated first; a refused value changes nothing)."""
        self._known(name)
        checked = _check(name, value)
        with self._lock:
            self._values[name] = checked

    def __setattr__(self, name: str, value: Any) -> None:
        raise ValueError("Please use update().")

    def as_dict(self) -> dict[str, Any]:
        """A copy of every option's current value."""
        return dict(self._values)

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != OPTION_DEFAULTS[k]}
        return f"Config({changed})"


config = Config()
