"""Records the public surface of google's ``grain`` into ``data/grain_0_2_18_surface.json``.

Run manually in a side virtual environment that has google's grain (with orbax-checkpoint, so that
``CheckpointSave``/``CheckpointRestore`` exist) installed, not grain_core::

    uv venv /tmp/grain-side -p 3.11
    VIRTUAL_ENV=/tmp/grain-side uv pip install grain==0.2.18 orbax-checkpoint jax array_record pyarrow
    /tmp/grain-side/bin/python tests/compat/record_grain_surface.py

The JSON lists, for every public module Grain users import, each public name with its kind and, for
callables, the parameters of ``inspect.signature`` (for classes: of ``__init__``, plus the public
methods). ``tests/integration/test_grain_surface.py`` checks grain_core against it; grain_core's tests never
need grain installed.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import pathlib
import sys
import types

MODULES = [
    "grain",
    "grain.python",
    "grain.python.experimental",
    "grain.experimental",
    "grain.sources",
    "grain.transforms",
    "grain.samplers",
    "grain.sharding",
    "grain.checkpoint",
    "grain.constants",
    "grain.multiprocessing",
    "grain.monitoring",
]

OUT = pathlib.Path(__file__).parent / "data" / "grain_0_2_18_surface.json"


def _params(obj) -> list[dict] | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    out = []
    for p in sig.parameters.values():
        entry = {"name": p.name, "kind": p.kind.name, "has_default": p.default is not p.empty}
        if p.default is not p.empty and isinstance(p.default, (bool, int, float, str, type(None))):
            entry["default"] = p.default
        out.append(entry)
    return out


def _kind(value) -> str:
    if isinstance(value, types.ModuleType):
        return "module"
    if inspect.isclass(value):
        return "class"
    if callable(value):
        return "function"
    return "value"


def _methods(cls) -> dict:
    methods = {}
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name, None)
        if isinstance(raw, property):
            methods[name] = {"kind": "property"}
            continue
        if isinstance(raw, (staticmethod, classmethod)):
            func = raw.__func__
            kind = type(raw).__name__
        elif inspect.isfunction(raw):
            func, kind = raw, "method"
        else:
            continue
        params = _params(func)
        if kind == "classmethod" and params:
            params = params[1:]
        methods[name] = {"kind": kind, "params": params}
    return methods


def _entry(value) -> dict:
    kind = _kind(value)
    entry: dict = {"kind": kind}
    if kind == "class":
        if issubclass(value, enum.Enum):
            entry["enum_members"] = [m.name for m in value]
        entry["init_params"] = _params(value)
        entry["methods"] = _methods(value)
    elif kind == "function":
        entry["params"] = _params(value)
    elif kind == "value":
        if isinstance(value, (bool, int, float, str)):
            entry["value"] = value
        elif isinstance(value, frozenset):
            entry["value"] = sorted(value)
        else:
            entry["type"] = type(value).__name__
            entry["attributes"] = sorted(n for n in dir(value) if not n.startswith("_"))
    return entry


def _module_surface(mod) -> dict:
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    return {name: _entry(getattr(mod, name)) for name in sorted(names)}


def main() -> None:
    import grain

    surface: dict = {
        "_comment": (
            "Recorded from google grain "
            f"{grain.__version__} (Python {sys.version.split()[0]}) by "
            "tests/compat/record_grain_surface.py; do not edit by hand."
        ),
        "grain_version": grain.__version__,
        "modules": {},
    }
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            parent, _, attr = name.rpartition(".")
            mod = getattr(importlib.import_module(parent), attr)
        surface["modules"][name] = _module_surface(mod)
    from grain._src.core import config as config_mod

    surface["config_options"] = {
        f.name.removeprefix("grain_"): f.default for f in config_mod._GRAIN_FLAGS
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(surface, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
