"""Imported once by the forkserver: heavy imports and plugin discovery done before any worker forks,
so a worker starts in milliseconds. Workers re-run discovery when their ``GRAIN_CORE_*`` environment
differs from the one discovery ran with here."""

from __future__ import annotations

import warnings

import cloudpickle  # noqa: F401
import numpy  # noqa: F401

import grain_core  # noqa: F401
import grain_core.dataset.iter_ops  # noqa: F401
import grain_core.dataset.map_ops  # noqa: F401
from grain_core.plugins.registry import get_registry

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        get_registry().ensure_loaded()
    except Exception:  # a worker reports plugin problems itself
        get_registry().reload()
