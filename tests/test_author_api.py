"""One import for plugin authors (issue 29): ``grain_core`` and ``grain_core.author``.

``grain_core.author`` re-exports the kernel's own objects (loaded on first use), and every
first-party plugin package, the example plugin, the ``grain-core new-plugin`` template and the
writing-plugins guide import the kernel only through ``grain_core`` (its top-level names) and
``grain_core.author`` (plugin tests may also use the conformance kit, ``grain_core.testing``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import grain_core as grain
from grain_core import author
from grain_core.cli import new_plugin

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = sorted(ROOT.glob("plugins/grain-plugin-*/grain_plugin_*")) + [
    ROOT / "examples" / "grain-plugin-example" / "grain_plugin_example"
]


def test_every_name_is_the_kernels_own_object():
    assert len(author.__all__) == len(set(author.__all__)) > 50
    for name in author.__all__:
        value = getattr(author, name)
        home = author._HOME[name]
        assert value is getattr(importlib.import_module(home), name), name
    assert author.DatasetIterator is grain.DatasetIterator
    assert set(author.__all__) <= set(dir(author))


def test_what_authors_need_is_there():
    needed = {
        # stage bases, give-back, chunk protocol
        "MapDataset", "IterDataset", "DatasetIterator", "OneParentMapDataset",
        "OneParentIterDataset", "OneParentIterator", "ManyParentIterDataset",
        "ManyParentIterator", "SourceIterDataset", "SourceIterator", "CHUNK_BYTES",
        # states, seeds, validation, shares, trees, files
        "StateField", "make_state", "expect_state", "StateMismatchError", "InvalidStateError",
        "derive_seed", "IndexShuffle", "shuffle_tables", "check_int", "check_indices",
        "claim_worker_share", "no_worker_share", "nbytes", "map_structure",
        "resolve_filesystem", "read_ranges",
        # plugins and runtimes
        "hookimpl", "register", "ENTRY_POINT_GROUP", "WorkerJob", "WorkerLoop", "WorkerPool",
        "Start", "Elements", "End", "Failure", "Consumed", "WorkerLostError",
    }  # fmt: skip
    assert needed <= set(author.__all__), needed - set(author.__all__)
    assert hasattr(author.DatasetIterator, "unread") and author.DatasetIterator.can_unread is False


def test_an_unknown_name_says_where_to_look():
    with pytest.raises(AttributeError, match="grain_core.author.__all__"):
        author.no_such_name  # noqa: B018


def test_importing_author_loads_nothing_more():
    code = (
        "import sys, grain_core, grain_core.author\n"
        "assert 'grain_core.runtime.api' not in sys.modules, 'runtime loaded eagerly'\n"
        "from grain_core.author import WorkerJob\n"
        "assert 'grain_core.runtime.api' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _is_kit(name: str) -> bool:
    return name == "grain_core.testing" or name.startswith("grain_core.testing.")


def kernel_imports(source: str, *, tests: bool = False) -> Iterator[str]:
    """Each import of a grain_core module other than ``grain_core`` and ``grain_core.author``
    (``grain_core.testing`` too where ``tests``), as ``line: what``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for a in node.names:
                name = a.name
                if name.startswith("grain_core.") and name != "grain_core.author":
                    if not (tests and _is_kit(name)):
                        yield f"{node.lineno}: import {name}"
        elif isinstance(node, ast.ImportFrom) and node.module:
            mod = node.module
            if mod == "grain_core":
                for a in node.names:
                    sub = f"grain_core.{a.name}"
                    if a.name == "author" or (tests and _is_kit(sub)):
                        continue
                    if importlib.util.find_spec(sub) is not None:
                        yield f"{node.lineno}: from grain_core import {a.name} (a module)"
            elif mod.startswith("grain_core.") and mod != "grain_core.author":
                if not (tests and _is_kit(mod)):
                    yield f"{node.lineno}: from {mod} import ..."


def test_the_scan_catches_each_kind_of_import():
    bad = (
        "import grain_core.filesystems as fs\n"
        "from grain_core import state as _state\n"
        "from grain_core.dataset.stages import OneParentIterator\n"
        "def f():\n"
        "    from grain_core.runtime import api\n"
        "from grain_core import testing\n"
    )
    found = "\n".join(kernel_imports(bad))
    for what in ("grain_core.filesystems", "import state", "grain_core.dataset.stages",
                 "grain_core.runtime", "import testing"):  # fmt: skip
        assert what in found, (what, found)
    good = (
        "import grain_core as grain\n"
        "from grain_core import DatasetIterator, author\n"
        "from grain_core.author import StateField, make_state\n"
    )
    assert list(kernel_imports(good)) == []
    assert list(kernel_imports("from grain_core import testing\n", tests=True)) == []


def _package_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in pkg.rglob("*.py"))


def test_packages_are_found():
    assert len(PACKAGES) >= 11 and len(_package_files()) >= 30


@pytest.mark.parametrize("path", _package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_first_party_plugin_imports_the_kernel_only_through_grain_core_and_author(path):
    found = list(kernel_imports(path.read_text()))
    assert not found, (
        f"{path.relative_to(ROOT)} imports kernel modules; import grain_core (as grain) and "
        "grain_core.author only (docs/writing-plugins.md):\n  " + "\n  ".join(found)
    )


def test_new_plugin_template_imports_the_kernel_only_through_grain_core_and_author():
    templates = {k: v for k, v in vars(new_plugin).items() if k.startswith("_") and isinstance(v, str)}
    sources = [t for t in templates.values() if re.search(r"^(import|from) ", t, re.M)]
    assert len(sources) >= 3
    for text in sources:
        code = "\n".join(_IMPORT.findall(text))
        found = list(kernel_imports(code, tests="def test_" in text))
        assert not found, found


def test_writing_plugins_guide_imports_the_kernel_only_through_grain_core_and_author():
    text = (ROOT / "docs" / "writing-plugins.md").read_text()
    statements = _IMPORT.findall(text)
    assert len(statements) >= 5
    found = list(kernel_imports("\n".join(statements), tests=True))
    assert not found, found


# An import of grain_core (one line, or parenthesised over several) anywhere in a text.
_IMPORT = re.compile(
    r"^[ \t]*(from grain_core[\w.]* import \([^)]*\)|from grain_core[\w.]* import [^\n(]*"
    r"|import grain_core[^\n]*)",
    re.M,
)
