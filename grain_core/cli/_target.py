"""Loading a pipeline named on the command line and describing its elements."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

import numpy as np


class TargetError(ValueError):
    """The TARGET argument names nothing usable."""


def load_target(target: str) -> Any:
    """Returns the dataset ``target`` names: ``path/to/file.py:attr`` or ``module:attr``.

    ``attr`` is a dataset or a zero-argument callable returning one (it is called). Dotted
    attributes (``module:obj.attr``) are followed.
    """
    if ":" not in target:
        raise TargetError(f"TARGET must look like 'file.py:name' or 'module:name', got {target!r}.")
    where, _, attr = target.rpartition(":")
    if where.endswith(".py") or os.sep in where or "/" in where:
        if not os.path.exists(where):
            raise TargetError(f"no such file: {where}")
        name = "_grain_core_target_" + os.path.splitext(os.path.basename(where))[0]
        spec = importlib.util.spec_from_file_location(name, where)
        if spec is None or spec.loader is None:
            raise TargetError(f"cannot import {where}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        _add_import_dir(os.path.dirname(os.path.abspath(where)))
        spec.loader.exec_module(module)
        try:  # mp_prefetch workers cannot import it by this name: send its functions by value
            import cloudpickle

            cloudpickle.register_pickle_by_value(module)
        except Exception:
            pass
    else:
        _add_import_dir(os.getcwd())
        module = importlib.import_module(where)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"{where} has no attribute {attr!r}") from None
    from grain_core.dataset.base import IterDataset, MapDataset

    if not isinstance(obj, (MapDataset, IterDataset)) and callable(obj):
        obj = obj()
    if not isinstance(obj, (MapDataset, IterDataset)):
        raise TargetError(f"{target} is a {type(obj).__name__}, not a MapDataset or IterDataset.")
    return obj


def element_spec(element: Any) -> list[dict[str, Any]]:
    """``[{path, type, shape, dtype}]`` for every leaf of ``element``."""
    from grain_core.tree import flatten_with_paths

    out: list[dict[str, Any]] = []
    for path, leaf in flatten_with_paths(element):
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            out.append({"path": path, "type": type(leaf).__name__, "shape": list(leaf.shape),
                        "dtype": str(leaf.dtype)})
        elif isinstance(leaf, (bytes, str)):
            out.append({"path": path, "type": type(leaf).__name__, "shape": [], "dtype": None,
                        "length": len(leaf)})
        else:
            dtype = np.asarray(leaf).dtype if isinstance(leaf, (bool, int, float, complex)) else None
            out.append({"path": path, "type": type(leaf).__name__, "shape": [],
                        "dtype": str(dtype) if dtype is not None else None})
    return out


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.1f} {unit}" if unit != "B" else f"{n:,.0f} B"
        n /= 1000
    return f"{n} B"


def _add_import_dir(directory: str) -> None:
    """Makes modules in ``directory`` (the target's folder, or the working directory for
    ``module:name``) importable, after everything installed: plugins are discovered first, without
    it (a ``*.dist-info`` planted there is never seen), and an installed package is never shadowed
    by a file of the same name there."""
    from grain_core.plugins.registry import get_registry

    get_registry().ensure_loaded()
    if not any(os.path.abspath(p or ".") == directory for p in sys.path):
        sys.path.append(directory)
