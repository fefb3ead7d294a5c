"""grain_core has every public name and keyword of google grain 0.2.18.

``tests/compat/data/grain_0_2_18_surface.json`` was recorded from google grain 0.2.18 by
``tests/compat/record_grain_surface.py`` (run manually in a side venv); grain is not needed here.
An integration test: the names of every first-party plugin must be installed. For each public
module ``grain.X`` the matching ``grain_core.X`` must have every recorded name, of the same kind, and
every callable must accept every parameter Grain's accepts, the same way (positional parameters at
the same positions, keyword parameters by name). Extra parameters of ours must have defaults.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pathlib
import types

import pytest

DATA = json.loads(
    (
        pathlib.Path(__file__).parents[1] / "compat" / "data" / "grain_0_2_18_surface.json"
    ).read_text()
)

# Grain names that are Grain's internals, not API: each with the reason it has no equivalent.
NOT_API = {
    ("grain", "proto"): "Grain's protobuf package for its own execution summaries",
    ("grain.monitoring", "annotations"): "the `from __future__ import annotations` feature object",
    ("grain.monitoring", "monitoring_base"): "Grain's private base module of its metric classes",
    ("grain.monitoring", "fast_monitoring"): "Grain's slot for an internal C++ metrics backend",
}

# Deliberate signature differences, each with its reason (also listed in docs/migration.md).
ACCEPTED = {
    "grain.experimental.ShapeDtypeStruct()": "Grain's shape/dtype 'defaults' are the property "
    "objects of its Protocol base (ShapeDtypeStruct() builds a broken object); ours are required",
    "grain.python.experimental.ShapeDtypeStruct()": "as grain.experimental.ShapeDtypeStruct",
}

# Classes whose public methods are checked too (the ones Grain users call methods on).
METHOD_CLASSES = {
    "MapDataset",
    "IterDataset",
    "DatasetIterator",
    "DataLoader",
    "DataLoaderIterator",
    "PyGrainDatasetIterator",
    "RngPool",
    "SharedMemoryArray",
    "SharedMemoryArrayMetadata",
    "SharedMemoryDataSource",
    "InMemoryDataSource",
    "RecordMetadata",
    "DatasetOptions",
    "Counter",
    "Metric",
    "EventMetric",
    "Bucketer",
    "CheckpointHandler",
    "PyGrainCheckpointHandler",
    "InterleaveIterDataset",
    "ElasticIterator",
    "CacheIterDataset",
    "TFRecordIterDataset",
    "PackAndBatchOperation",
    "ShapeDtypeStruct",
    "ReadOptions",
    "MultiprocessingOptions",
    "ShardOptions",
    "IndexSampler",
    "Record",
}


def _ours(module_name: str):
    name = "grain_core" + module_name[len("grain") :]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        parent, _, attr = name.rpartition(".")
        return getattr(importlib.import_module(parent), attr)


def _entries():
    for mod, names in DATA["modules"].items():
        for name, entry in names.items():
            if (mod, name) not in NOT_API:
                yield pytest.param(mod, name, entry, id=f"{mod}.{name}")


def _check_params(where: str, ours, recorded: list[dict] | None) -> list[str]:
    if recorded is None or where in ACCEPTED:
        return []
    if isinstance(ours, types.UnionType):
        # Grain's Transformation is a typing.Union (recorded as (*args, **kwargs)); ours is a union too.
        return []
    try:
        params = list(inspect.signature(ours).parameters.values())
    except (TypeError, ValueError):
        return [f"{where}: no inspectable signature"]
    by_name = {p.name: p for p in params}
    problems = []
    grain_names = {r["name"] for r in recorded}
    grain_varargs = any(r["kind"] == "VAR_POSITIONAL" for r in recorded)
    grain_varkw = any(r["kind"] == "VAR_KEYWORD" for r in recorded)
    our_positional = [
        p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    for r in (r for r in recorded if r["name"] not in ("self", "cls")):
        kind = r["kind"]
        if kind == "VAR_POSITIONAL":
            if not any(p.kind == p.VAR_POSITIONAL for p in params):
                problems.append(f"{where}: Grain takes *{r['name']}, ours does not")
            continue
        if kind == "VAR_KEYWORD":
            if not any(p.kind == p.VAR_KEYWORD for p in params):
                problems.append(f"{where}: Grain takes **{r['name']}, ours does not")
            continue
        p = by_name.get(r["name"])
        if p is None:
            problems.append(f"{where}: missing parameter {r['name']!r}")
            continue
        if kind in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD"):
            grain_pos = [
                x["name"]
                for x in recorded
                if x["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
                and x["name"] not in ("self", "cls")
            ]
            j = grain_pos.index(r["name"])
            ours_pos = [n for n in our_positional if n not in ("self", "cls")]
            if j >= len(ours_pos) or ours_pos[j] != r["name"]:
                problems.append(
                    f"{where}: Grain's positional parameter {j} is {r['name']!r}, ours has "
                    f"{ours_pos[j] if j < len(ours_pos) else None!r}"
                )
        if kind in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY") and p.kind == p.POSITIONAL_ONLY:
            problems.append(f"{where}: {r['name']!r} cannot be passed by keyword")
        if (
            r["has_default"]
            and p.default is p.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ):
            problems.append(f"{where}: {r['name']!r} is optional in Grain but required here")
    for p in params:
        if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if (
            p.default is p.empty
            and p.name not in grain_names
            and not (grain_varargs or grain_varkw)
        ):
            problems.append(f"{where}: our required parameter {p.name!r} is not Grain's")
    return problems


def _kind_ok(kind: str, obj) -> bool:
    if kind == "module":
        return isinstance(obj, types.ModuleType)
    if kind == "class":
        return isinstance(obj, type)
    if kind == "function":
        return callable(obj) or isinstance(obj, types.UnionType)
    return True


@pytest.mark.parametrize("module_name, name, entry", list(_entries()))
def test_grain_name_exists_with_its_parameters(module_name, name, entry):
    mod = _ours(module_name)
    assert hasattr(mod, name), f"{module_name}.{name} is missing from grain_core"
    obj = getattr(mod, name)
    assert _kind_ok(entry["kind"], obj), (
        f"{module_name}.{name} is a {entry['kind']} in Grain, ours is {type(obj).__name__}"
    )
    problems = []
    if "value" in entry and not isinstance(obj, types.ModuleType):
        expected = entry["value"]
        got = sorted(obj) if isinstance(obj, frozenset) else obj
        assert got == expected, f"{module_name}.{name} is {got!r}, Grain's is {expected!r}"
    if entry["kind"] == "function":
        problems += _check_params(f"{module_name}.{name}", obj, entry.get("params"))
    if entry["kind"] == "class":
        if entry.get("enum_members"):
            assert [m.name for m in obj] == entry["enum_members"]
        else:
            problems += _check_params(f"{module_name}.{name}()", obj, entry.get("init_params"))
        if name in METHOD_CLASSES:
            for meth, m in entry["methods"].items():
                if not hasattr(obj, meth):
                    problems.append(f"{module_name}.{name}.{meth} is missing")
                    continue
                if m["kind"] != "property":
                    problems += _check_params(
                        f"{module_name}.{name}.{meth}", getattr(obj, meth), m.get("params")
                    )
    if entry["kind"] == "value" and "attributes" in entry:
        for attr in entry["attributes"]:
            if not hasattr(obj, attr):
                problems.append(f"{module_name}.{name}.{attr} is missing")
    assert not problems, "\n".join(problems)


def test_config_has_grains_options_and_defaults():
    import grain_core

    for option, default in DATA["config_options"].items():
        assert grain_core.config.get_or_default(option) == default, option


def test_recorded_surface_names_its_origin():
    assert DATA["grain_version"] == "0.2.18"
    assert "google grain 0.2.18" in DATA["_comment"]
