"""Shared by the tutorial scripts: print a value as the tutorial does and keep a plain copy of it.

``show(name, value)`` pretty-prints ``value`` (the tutorials' ``pprint``) and stores a JSON-able
copy under ``name`` in ``$TUTORIAL_RESULTS`` (default ``results.json`` in the working directory),
rewritten after every value so that a script stopped by an error still leaves what it reached;
``done()`` marks the script as finished (key ``_done``). The copy keeps what a user can see: numpy arrays keep
their dtype, dict keys are sorted, tuples become lists and bytes are tagged.
"""

from __future__ import annotations

import json
import os
import pprint

import numpy as np

_RESULTS: dict = {}


def plain(value):
    """A JSON-able copy of ``value`` that keeps array dtypes and tags bytes."""
    if isinstance(value, np.ndarray):
        return {"array": plain(value.tolist()), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return plain(value.item())
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"tutorial_io cannot record a {type(value).__name__}: {value!r}")


def show(name: str, value, echo: bool = True):
    """Pretty-print ``value`` (unless ``echo`` is false) and keep it under ``name``."""
    if name in _RESULTS:
        raise KeyError(f"{name!r} was already recorded")
    if echo:
        pprint.pprint(value)
    _RESULTS[name] = plain(value)
    _write()
    return value


def done() -> None:
    """Mark the script as run to its end."""
    _RESULTS["_done"] = True
    _write()


def _write() -> None:
    path = os.environ.get("TUTORIAL_RESULTS", "results.json")
    with open(path, "w") as f:
        json.dump(_RESULTS, f, indent=1, sort_keys=True)
