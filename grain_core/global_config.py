"""Grain's global options object (``grain.config``, here ``grain_core.config``), without absl flags.

``grain_core.config.update("py_debug_mode", True)`` sets an option, ``grain_core.config.py_debug_mode``
reads it, ``get_or_default(name)`` reads it too (there is no flag parsing, so it never fails for a
known option). The option names and defaults are Grain 0.2.18's. An unknown name raises
``ValueError`` naming the known ones; a value of the wrong type raises ``TypeError`` and changes
nothing. ``GRAIN_<NAME>`` environment variables (e.g. ``GRAIN_PY_DEBUG_MODE=1``) set an option's
starting value, read once when the module is imported.

Grain's options are stored and returned for code written against Grain. ``py_debug_mode`` and
``py_dataset_visualization_output_dir`` act as in Grain (:mod:`grain_core.debug`: periodic per-stage
statistics, the pipeline graph); the ``tf_*`` options select TensorFlow implementations grain_core
does not have. See docs/migration.md.

One option is grain_core's own: ``grain_exact`` (default False; environment variable
``GRAIN_CORE_GRAIN_EXACT=1``). Off, every epoch of every pipeline is exactly what its stages
promise (a shuffle is a permutation; no window, shard or slice repeats or drops a record). On,
pipelines reproduce Grain 0.2.18's output bit for bit, its data bugs included. A stage reads it
when it is built (:func:`grain_exact`), so a pipeline keeps the mode it was built in. It is on
automatically under the ``import grain`` alias (unless set explicitly) and iterator states record
which mode wrote them (see docs/differences.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "CORRECT_MODE",
    "Config",
    "DataModeError",
    "GRAIN_EXACT_ENV",
    "GRAIN_EXACT_MODE",
    "MODE_FIELD",
    "OPTION_DEFAULTS",
    "config",
    "grain_exact",
    "grain_exact_opted_out",
    "mode_fields",
    "mode_switch_hint",
]

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
    # grain_core's own: reproduce Grain 0.2.18's data bugs (see the module docstring)
    "grain_exact": False,
}

#: The environment variable that sets ``grain_exact``'s starting value (``GRAIN_GRAIN_EXACT`` too).
GRAIN_EXACT_ENV = "GRAIN_CORE_GRAIN_EXACT"

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
        var = GRAIN_EXACT_ENV if name == "grain_exact" else f"GRAIN_{name.upper()}"
        raise ValueError(f"environment variable {var}={raw!r} is not a boolean (use 1 or 0).")
    if isinstance(default, int):
        return int(raw)
    return raw


class Config:
    """Holds grain_core's global options; use the module-level ``config`` instance."""

    def __init__(self, environ: Mapping[str, str] | None = None):
        values = dict(OPTION_DEFAULTS)
        env = os.environ if environ is None else environ
        explicit = set()
        for name in OPTION_DEFAULTS:
            raw = env.get(f"GRAIN_{name.upper()}")
            if name == "grain_exact":
                raw = env.get(GRAIN_EXACT_ENV, raw)
            if raw is not None:
                values[name] = _check(name, _from_env(name, raw))
                explicit.add(name)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_explicit", explicit)
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
            self._explicit.add(name)

    def default_grain_exact(self, value: bool) -> None:
        """Sets ``grain_exact`` unless the user set it (``update`` or the environment): the
        ``import grain`` alias turns it on this way."""
        with self._lock:
            if "grain_exact" not in self._explicit:
                self._values["grain_exact"] = bool(value)

    @contextlib.contextmanager
    def override(self, **values: Any) -> Iterator[None]:
        """Sets options for the duration of a ``with`` block, then puts them back (as if never
        set): ``with grain_core.config.override(grain_exact=True): ds = ...``. Not thread-local:
        a stage built in another thread meanwhile sees the overridden values too."""
        for name, value in values.items():
            self._known(name)
            _check(name, value)
        with self._lock:
            before, explicit = dict(self._values), set(self._explicit)
        for name, value in values.items():
            self.update(name, value)
        try:
            yield
        finally:
            with self._lock:
                for name in values:
                    self._values[name] = before[name]
                    if name not in explicit:
                        self._explicit.discard(name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise ValueError("Please use update().")

    def as_dict(self) -> dict[str, Any]:
        """A copy of every option's current value."""
        return dict(self._values)

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != OPTION_DEFAULTS[k]}
        return f"Config({changed})"


config = Config()


def grain_exact() -> bool:
    """Whether a stage built now reproduces Grain 0.2.18's output bugs included (the
    ``grain_exact`` option; see the module docstring). Stages call it in ``__init__``."""
    return bool(config.grain_exact)


def grain_exact_opted_out() -> bool:
    """Whether ``grain_exact`` was set to False explicitly (``update``, ``override`` or the
    environment): then a state written by google grain is refused instead of switching the
    iterator restoring it to Grain-exact data (see :mod:`grain_core.dataset.grain_exact_switch`)."""
    with config._lock:
        return "grain_exact" in config._explicit and not config._values["grain_exact"]


#: The stage-description field (a ``fingerprint_fields`` entry, so a state records it) through which
#: a stage whose output depends on the mode says which mode built it.
MODE_FIELD = "data_mode"
GRAIN_EXACT_MODE = "grain_exact"
CORRECT_MODE = "correct"


def mode_fields(grain_exact: bool, matters: bool) -> dict[str, str]:
    """``{MODE_FIELD: "correct"}`` for a stage built in correct mode whose output differs from
    Grain's (``matters``), else ``{}``. A stage puts it in its ``fingerprint_fields``, so its
    states record it: states of pipelines the mode does not change restore in either mode, and a
    state without the field where it matters is Grain-exact's (written by Grain, by grain_core
    in Grain-exact mode, or by a grain_core older than the switch, which gave Grain's data)."""
    return {MODE_FIELD: CORRECT_MODE} if matters and not grain_exact else {}


class DataModeError(ValueError):
    """A state written in one data mode is restored into a pipeline built in the other, and the
    two give different data there (the message says how to switch). Nothing was changed."""


def mode_switch_hint(saved_mode: object) -> str:
    """What to do about a state written in another mode than the pipeline restoring it."""
    if saved_mode == CORRECT_MODE:
        return (
            "The state was written in grain_core's correct mode, but this pipeline was built in "
            "Grain-exact mode (grain_core.config.grain_exact is on, e.g. under the `import grain` "
            "alias), and the two modes give different data here. Build the pipeline after "
            "grain_core.config.update('grain_exact', False) (or with GRAIN_CORE_GRAIN_EXACT=0)."
        )
    return (
        "The state was written in Grain-exact mode (by google grain, by grain_core with "
        "grain_core.config.grain_exact on, or by a grain_core older than the switch), but this "
        "pipeline was built in grain_core's correct mode, and the two modes give different data "
        "here (Grain 0.2.18 repeats and drops records in this pipeline). Build the pipeline after "
        "grain_core.config.update('grain_exact', True) (or with GRAIN_CORE_GRAIN_EXACT=1) to "
        "continue with Grain's data."
    )
