"""Imports inside ``grain_core/`` point down the layers of ``docs/architecture.md``, with no circle.

Every module of the kernel is parsed with :mod:`ast` (nothing is imported) and every ``import`` in it
is an edge: at module level, inside functions and methods, under ``if TYPE_CHECKING:`` — all of them,
and ``importlib.import_module("grain_core....")`` / ``__import__`` with a literal name too.
``LAYERS`` below is the one table of the layer order; ``docs/architecture.md`` shows the same table
(checked here too). To place a new module, add its name (or a pattern) to the right layer.

Rules:

* a module imports only modules of its own layer or of layers below it (``LAYERS`` is top first);
* no circle among modules, even inside one layer (a package's ``__init__`` imports its own modules,
  so those never import the package back);
* every module of ``grain_core/`` belongs to exactly one layer.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "grain_core"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# (layer name, module patterns), top layer first. Patterns are fnmatch patterns over dotted names.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "entry points",
        (
            "grain_core.__main__",
            "grain_core.cli",
            "grain_core.cli.*",
            "grain_core._forkserver_preload",
            "grain_core.compat.__main__",
        ),
    ),
    (
        "public surface",
        (
            "grain_core",
            "grain_core.python",
            "grain_core.python.*",
            "grain_core.experimental",
            "grain_core.sources",
            "grain_core.loading",
            "grain_core.data_loader",
            "grain_core.data_loader_stages",
            "grain_core.samplers",
            "grain_core.checkpoint",
            "grain_core.checkpoint.*",
            "grain_core.testing",
            "grain_core.testing.*",
            "grain_core.stats",
            "grain_core.visualize",
            "grain_core.debug",
            "grain_core.compat",
            "grain_core.compat.*",
            "grain_core._wiring",
            "grain_core.operations",
            "grain_core.element_spec",
            "grain_core.monitoring",
            "grain_core.multiprocessing",
            "grain_core.memory_source",
            "grain_core.pack_and_batch",
            "grain_core.rng_pool",
            "grain_core.author",
        ),
    ),
    ("runtime", ("grain_core.runtime", "grain_core.runtime.*")),
    ("dataset kernel", ("grain_core.dataset", "grain_core.dataset.*")),
    (
        "contracts",
        (
            "grain_core.state",
            "grain_core.grain_states",
            "grain_core.seeds",
            "grain_core.shuffle_cipher",
            "grain_core.options",
            "grain_core.sharding",
            "grain_core.transforms",
            "grain_core.records",
            "grain_core.tree",
            "grain_core.constants",
            "grain_core.global_config",
        ),
    ),
    ("plugin registry", ("grain_core.lazy", "grain_core.plugins", "grain_core.plugins.*")),
    (
        "utilities",
        (
            "grain_core.validation",
            "grain_core.suggest",
            "grain_core._safepath",
            "grain_core.filesystems",
            "grain_core.index_arrays",
        ),
    ),
]


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (a package is its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _nearest_module(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_dynamic_import(func: ast.expr) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in ("import_module", "__import__")


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The kernel modules ``module`` imports, anywhere in its code, with the first line of each."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import name``: the submodule ``pkg.name`` where there is one, else ``pkg``.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            # importlib.import_module("grain_core.x") / __import__("grain_core.x"): an import too
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                targets = [arg.value]
        for target in targets:
            if target.split(".")[0] != "grain_core":
                continue
            hit = _nearest_module(target, modules)
            if hit is not None and hit != module:
                found.setdefault(hit, node.lineno)
    return found


def layer_of(module: str) -> int:
    """The index in LAYERS of ``module``'s layer: the one naming it exactly, else the one pattern
    matching it."""
    hits = [i for i, (_, patterns) in enumerate(LAYERS) if module in patterns]
    if not hits:
        hits = [
            i for i, (_, patterns) in enumerate(LAYERS) if any(fnmatch.fnmatchcase(module, p) for p in patterns)
        ]
    if len(hits) != 1:
        where = "no layer" if not hits else f"layers {[LAYERS[i][0] for i in hits]}"
        raise AssertionError(
            f"{module} is in {where}: place it in exactly one layer of LAYERS in {__file__}"
        )
    return hits[0]


def import_graph() -> dict[str, dict[str, int]]:
    modules = module_files()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_one_layer():
    for module in module_files():
        layer_of(module)


def test_imports_point_down():
    upward = []
    for module, targets in import_graph().items():
        for target, line in targets.items():
            if layer_of(target) < layer_of(module):
                upward.append(
                    f"{module} (line {line}, {LAYERS[layer_of(module)][0]}) imports {target} "
                    f"({LAYERS[layer_of(target)][0]})"
                )
    assert not upward, "imports pointing up the layers:\n" + "\n".join(upward)


def test_no_import_circle():
    graph = import_graph()
    found = []
    for comp in cycles(graph):
        edges = [f"  {a} -> {b} (line {graph[a][b]})" for a in comp for b in graph[a] if b in comp]
        found.append(f"circle of {len(comp)} modules:\n" + "\n".join(edges))
    assert not found, "\n".join(found)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    src = tmp_path / "grain_core"
    (src / "sub").mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "sub" / "__init__.py").write_text("from . import leaf\n")
    (src / "sub" / "leaf.py").write_text("def f():\n    from grain_core.sub import other\n")
    (src / "sub" / "other.py").write_text(
        "import importlib\ndef g():\n    from ..sub import leaf\n    importlib.import_module('grain_core')\n"
    )
    modules = {
        "grain_core": src / "__init__.py",
        "grain_core.sub": src / "sub" / "__init__.py",
        "grain_core.sub.leaf": src / "sub" / "leaf.py",
        "grain_core.sub.other": src / "sub" / "other.py",
    }
    graph = {m: imports_of(m, p, modules) for m, p in modules.items()}
    assert graph["grain_core.sub"] == {"grain_core.sub.leaf": 1}
    assert graph["grain_core.sub.leaf"] == {"grain_core.sub.other": 2}
    assert graph["grain_core.sub.other"] == {"grain_core.sub.leaf": 3, "grain_core": 4}
    assert cycles(graph) == [["grain_core.sub.leaf", "grain_core.sub.other"]]


def test_architecture_doc_shows_the_layer_table():
    """docs/architecture.md has a table row ``| n | layer | `patterns` |`` per layer, in order."""
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*$", ARCHITECTURE.read_text(), re.M)
    documented = [(name, tuple(re.findall(r"`([^`]+)`", cell))) for _, name, cell in rows]
    assert documented == LAYERS, (
        "docs/architecture.md's layer table differs from LAYERS in tests/test_layers.py; "
        "update the doc"
    )


@pytest.mark.parametrize("module", ["grain_core.dataset.base", "grain_core.plugins.registry"])
def test_low_layers_do_not_name_higher_ones(module):
    """The two modules the old circle ran through reach nothing above their layer."""
    graph = import_graph()
    assert all(layer_of(t) >= layer_of(module) for t in graph[module])


# --- typed wiring: which module fills which builder of the kernel's stage tables ------------------

#: The builders filled from a layer above the table's (docs/architecture.md, "Typed wiring"):
#: (table module, builder) -> filling module. Exactly these; any other fill stays in its layer.
UPWARD_FILLS: dict[tuple[str, str], str] = {
    ("grain_core.dataset.base", "MultiprocessPrefetchIterDataset"): "grain_core._wiring",
    ("grain_core.dataset.base", "infer_element_spec"): "grain_core.element_spec",
    ("grain_core.dataset.iterator", "save_iterator_state"): "grain_core._wiring",
    ("grain_core.dataset.iterator", "load_iterator_state"): "grain_core._wiring",
    ("grain_core.dataset.locator", "debug_iterator"): "grain_core._wiring",
}


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it was imported as (``from a.b import c`` gives ``a.b.c``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    names[a.name.split(".")[0]] = a.name.split(".")[0]
    return names


def stage_tables() -> dict[str, tuple[str, frozenset[str]]]:
    """Each table instance (``module.name``) -> (its module, the builders its class declares)."""
    out = {}
    for module, path in module_files().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared = {
            node.name: frozenset(
                s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            )
            for node in tree.body
            if isinstance(node, ast.ClassDef)
            and any(getattr(b, "id", getattr(b, "attr", "")) == "StageTable" for b in node.bases)
        }
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) in declared
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        out[f"{module}.{target.id}"] = (module, declared[node.value.func.id])
    return out


def wiring() -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(table module, builder) -> [(filling module, dotted name of what it assigns), ...]."""
    tables = stage_tables()
    modules = module_files()
    fills: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = _imported_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
                    continue
                table = imported.get(target.value.id, f"{module}.{target.value.id}")
                if table not in tables:
                    continue
                value = ast.unparse(node.value)
                head, _, rest = value.partition(".")
                what = f"{imported[head]}.{rest}" if head in imported and rest else (
                    imported.get(value, f"{module}.{value}")
                )
                fills.setdefault((tables[table][0], target.attr), []).append((module, what))
    return fills


def test_every_builder_is_filled_once_by_the_module_that_defines_it():
    fills = wiring()
    modules = module_files()
    problems = []
    for table, (module, declared) in stage_tables().items():
        for builder in sorted(declared):
            got = fills.pop((module, builder), [])
            if len(got) != 1:
                problems.append(f"{table}.{builder} is filled {len(got)} times: {got}")
                continue
            (filler, what) = got[0]
            home, _, name = what.rpartition(".")
            defined = {
                n.name
                for n in ast.parse(modules[home].read_text(encoding="utf-8")).body
                if isinstance(n, (ast.ClassDef, ast.FunctionDef))
            } if home in modules else set()
            if name not in defined:
                problems.append(f"{table}.{builder} = {what} ({filler}): {home} does not define {name}")
    problems += [f"{m}: assigns {b!r}, which no table declares" for (m, b) in fills]
    assert not problems, "\n".join(problems)


def test_fills_from_above_are_exactly_the_documented_ones():
    upward = {}
    for (table, builder), got in wiring().items():
        for filler, _ in got:
            if layer_of(filler) < layer_of(table):
                upward[(table, builder)] = filler
    assert upward == UPWARD_FILLS, (
        "builders filled from a layer above their table differ from UPWARD_FILLS (and "
        "docs/architecture.md, 'Typed wiring'); fill a builder from its own layer, or document why not"
    )
    documented = re.findall(
        r"^\s*\|\s*`([\w.]+)`\s*\|\s*`(\w+)`\s*\|\s*`([\w.]+)`\s*\|", ARCHITECTURE.read_text(), re.M
    )
    assert {(t, b): f for t, b, f in documented} == UPWARD_FILLS, (
        "docs/architecture.md's 'Typed wiring' table differs from UPWARD_FILLS"
    )


def test_the_wiring_reader_sees_which_module_builds_which_stage():
    fills = wiring()
    assert fills[("grain_core.dataset.base", "MapMapDataset")] == [
        ("grain_core.dataset", "grain_core.dataset.map_ops.MapMapDataset")
    ]
    assert fills[("grain_core.dataset.base", "MultiprocessPrefetchIterDataset")] == [
        ("grain_core._wiring", "grain_core._wiring._mp_prefetch_stage")
    ]
