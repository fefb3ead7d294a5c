"""``grain-core new-plugin NAME``: writes a ``grain-plugin-NAME`` skeleton that passes its own tests."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

_PYPROJECT = '''[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "grain-plugin-{name}"
version = "0.1.0"
description = "grain_core plugin: {camel}DataSource and {camel}OffsetMapDataset."
requires-python = ">=3.11"
dependencies = ["grain-core-kernel>=0.1", "numpy>=1.26"]

[project.optional-dependencies]
test = ["pytest>=8"]

# This entry point is how `import grain_core` finds the plugin once it is installed.
[project.entry-points.grain_core]
{name_id} = "{pkg}.plugin"

[tool.setuptools.packages.find]
include = ["{pkg}*"]
'''

_INIT = '''"""grain-plugin-{name}: a grain_core plugin."""

from {pkg}.source import {camel}DataSource
from {pkg}.transform import {camel}OffsetMapDataset

__all__ = ["{camel}DataSource", "{camel}OffsetMapDataset"]
'''

_SOURCE = '''"""A random-access data source: ``len`` and ``__getitem__`` (plus a bulk ``__getitems__``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class {camel}DataSource:
    """``num_records`` records ``{{"id": int64, "features": float32[dim]}}``, computed from the index.

    Replace the body of ``_read`` with reading your storage. Keep the class picklable (store only
    paths and sizes, open files lazily) so it works in ``mp_prefetch`` worker processes.
    """

    def __init__(self, num_records: int = 1000, dim: int = 4):
        self.num_records = int(num_records)
        self.dim = int(dim)

    def __len__(self) -> int:
        return self.num_records

    def _read(self, index: int) -> dict:
        return {{
            "id": np.int64(index),
            "features": np.arange(self.dim, dtype=np.float32) + np.float32(index),
        }}

    def __getitem__(self, index: int) -> dict:
        index = int(index)
        if index < 0:
            index += self.num_records
        if not 0 <= index < self.num_records:
            raise IndexError(f"index {{index}} out of range for {{self.num_records}} records")
        return self._read(index)

    def __getitems__(self, indices: Sequence[int]) -> list[dict]:
        return [self[i] for i in indices]

    def __repr__(self) -> str:
        return f"{camel}DataSource(num_records={{self.num_records}}, dim={{self.dim}})"
'''

_TRANSFORM = '''"""A transformation: a ``MapDataset`` stage adding ``offset`` to every numeric leaf."""

from __future__ import annotations

from typing import Any

import numpy as np

import grain_core as grain
from grain_core.author import OneParentMapDataset, map_structure


def _add(x: Any, offset: float) -> Any:
    if isinstance(x, np.ndarray) and x.dtype.kind in "iuf":
        return x + np.asarray(offset).astype(x.dtype)
    if isinstance(x, np.generic) and x.dtype.kind in "iuf":
        return x + x.dtype.type(offset)
    return x


class {camel}OffsetMapDataset(OneParentMapDataset):
    """``parent[i]`` with ``offset`` added to its numeric leaves. Use it as
    ``{camel}OffsetMapDataset(ds, offset=1)`` or ``ds.pipe({camel}OffsetMapDataset, offset=1)``."""

    def __init__(self, parent: grain.MapDataset, offset: float = 1):
        super().__init__(parent)
        self.offset = offset

    def element_at(self, index: int) -> Any:
        x = self.parent.element_at(index)
        return None if x is None else map_structure(lambda v: _add(v, self.offset), x)

    def fingerprint_fields(self) -> dict:
        return {{"offset": self.offset}}

    def __str__(self) -> str:
        return f"{camel}OffsetMapDataset(offset={{self.offset}})"
'''

_PLUGIN = '''"""Hook implementations: what this plugin adds to grain_core."""

from grain_core.author import hookimpl
from {pkg}.source import {camel}DataSource
from {pkg}.transform import {camel}OffsetMapDataset


@hookimpl
def register_sources(register):
    # grain_core.sources.{camel}DataSource (and grain_core.{camel}DataSource)
    register({camel}DataSource)


@hookimpl
def register_transforms(register):
    # grain_core.experimental.{camel}OffsetMapDataset
    register({camel}OffsetMapDataset)
'''

_CONFTEST = '''"""Makes the plugin visible to grain_core when it is on sys.path but not pip-installed.

Installed (``pip install -e .``), the ``grain_core`` entry point finds it and this does nothing.
"""

import importlib_metadata

from grain_core.author import ENTRY_POINT_GROUP, register

_installed = any(
    ep.value.startswith("{pkg}.")
    for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP)
)
if not _installed:
    import {pkg}.plugin

    register({pkg}.plugin, name="{name_id}")
'''

_TESTS = '''"""Tests of grain-plugin-{name}, using grain_core's conformance kit."""

import numpy as np

import grain_core as grain
from grain_core import testing
from {pkg} import {camel}DataSource, {camel}OffsetMapDataset


def test_names_resolve_through_the_plugin_registry():
    assert grain.sources.{camel}DataSource is {camel}DataSource
    assert grain.experimental.{camel}OffsetMapDataset is {camel}OffsetMapDataset
    names = {{p.name for p in grain.plugins.list_plugins() if p.status in ("loaded", "registered")}}
    assert "{name_id}" in names


def test_source_conforms():
    testing.check_source({camel}DataSource(100, dim=3))


def test_transform_values():
    ds = grain.MapDataset.source({camel}DataSource(10)).pipe({camel}OffsetMapDataset, offset=2)
    assert len(ds) == 10
    x = ds[3]
    assert x["id"] == 5
    np.testing.assert_array_equal(x["features"], np.arange(4, dtype=np.float32) + 5)


def test_pipeline_checkpoints():
    ds = (
        grain.MapDataset.source({camel}DataSource(64))
        .seed(0)
        .shuffle()
        .pipe({camel}OffsetMapDataset, offset=1)
        .batch(4)
        .to_iter_dataset()
    )
    testing.assert_equal_output_after_checkpoint(ds)
    testing.check_deterministic(lambda: grain.MapDataset.source({camel}DataSource(32)).seed(1).shuffle())
'''

_README = '''# grain-plugin-{name}

A [grain_core](https://github.com/) plugin providing `grain_core.sources.{camel}DataSource` and
`grain_core.experimental.{camel}OffsetMapDataset`.

```bash
pip install -e ".[test]"
pytest tests
python -m grain_core plugins     # lists {name_id}
```
'''


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[-_]", name) if part)


MAX_NAME_LENGTH = 40
ALLOWED_NAMES = (
    f"NAME must be 1 to {MAX_NAME_LENGTH} characters: lowercase ASCII letters and digits, starting "
    "with a letter, with single '-' or '_' between them (e.g. 'my-source'; a leading "
    "'grain-plugin-' is dropped, upper case is lowered). It becomes the distribution "
    "grain-plugin-NAME, the folder grain-plugin-NAME/ and the package grain_plugin_NAME."
)


def check_name(name: str) -> str:
    """Returns ``name`` normalised (prefix ``grain-plugin-`` dropped, lower case), or raises
    ``ValueError`` saying what is allowed: a valid distribution and package name part, no path
    separators, at most :data:`MAX_NAME_LENGTH` characters."""
    if not isinstance(name, str):
        raise ValueError(f"plugin name must be a string, got {type(name).__name__}. {ALLOWED_NAMES}")
    norm = name.strip().removeprefix("grain-plugin-").lower()
    if len(norm) > MAX_NAME_LENGTH:
        raise ValueError(f"plugin name {name[:60]!r}... is {len(norm)} characters long. {ALLOWED_NAMES}")
    if not re.fullmatch(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*", norm, flags=re.ASCII):
        raise ValueError(f"plugin name {name!r} is not allowed. {ALLOWED_NAMES}")
    return norm


def write_skeleton(name: str, directory: Path) -> Path:
    """Writes ``directory/grain-plugin-<name>/`` and returns its path. A refused name or target
    writes nothing."""
    name = check_name(name)
    name_id = name.replace("-", "_")
    fmt = {"name": name, "name_id": name_id, "pkg": f"grain_plugin_{name_id}", "camel": _camel(name)}
    root = Path(directory) / f"grain-plugin-{name}"
    if Path(directory).exists() and not Path(directory).is_dir():
        raise NotADirectoryError(f"--dir {directory} is not a directory.")
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise FileExistsError(f"{root} exists and is not an empty directory.")
    Path(directory).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=directory))
    try:  # written beside the target and renamed into place: a failure leaves nothing behind
        pkg = staging / fmt["pkg"]
        files = {
            staging / "pyproject.toml": _PYPROJECT,
            staging / "README.md": _README,
            pkg / "__init__.py": _INIT,
            pkg / "source.py": _SOURCE,
            pkg / "transform.py": _TRANSFORM,
            pkg / "plugin.py": _PLUGIN,
            pkg / "py.typed": "",
            staging / "tests" / "conftest.py": _CONFTEST,
            staging / "tests" / "test_plugin.py": _TESTS,
        }
        for path, template in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(template.format(**fmt))
        if root.exists():
            root.rmdir()  # empty, checked above
        staging.rename(root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return root


def cmd_new_plugin(args: argparse.Namespace) -> int:
    try:
        root = write_skeleton(args.name, Path(args.dir))
    except (ValueError, OSError) as e:
        print(f"grain-core new-plugin: error: {e}", file=sys.stderr)
        return 2
    print(f"Wrote {root}")
    print("Next:")
    print(f"  cd {root} && pip install -e '.[test]' && pytest tests")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("new-plugin", help="write a grain-plugin-NAME skeleton",
                       description="Writes grain-plugin-NAME/ (pyproject with the entry point, a "
                       "source and a transform registered through the hooks, tests using "
                       "grain_core.testing).")
    p.add_argument("name")
    p.add_argument("--dir", default=".", help="where to create it (default: current directory)")
    p.set_defaults(func=cmd_new_plugin)
