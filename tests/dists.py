"""Installs a test-only plugin project into a directory the way a wheel install would: its package
next to a ``<name>-<version>.dist-info`` with ``METADATA`` and ``entry_points.txt`` taken from its
``pyproject.toml``. Putting that directory on ``sys.path`` makes it a real installed distribution
for ``importlib.metadata`` (and so for grain_core's discovery); nothing is mocked."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

ISOLATED = Path(__file__).parent / "plugins" / "isolated"


def write_dist_info(target: Path, name: str, version: str, entry_points: dict[str, str]) -> Path:
    """Writes ``<name>-<version>.dist-info`` declaring ``entry_points`` in the ``grain_core`` group."""
    info = target / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[grain_core]\n{lines}")
    (info / "RECORD").write_text("")
    return info


def install(project: str | Path, target: Path) -> str:
    """Installs the project folder ``project`` (a name under ``tests/plugins/isolated``, or a path)
    into ``target``; returns its distribution name."""
    src = Path(project) if Path(project).is_absolute() else ISOLATED / project
    meta = tomllib.loads((src / "pyproject.toml").read_text())["project"]
    for pkg in src.iterdir():
        if pkg.is_dir() and (pkg / "__init__.py").exists():
            shutil.copytree(pkg, target / pkg.name, ignore=shutil.ignore_patterns("__pycache__"))
    write_dist_info(target, meta["name"], meta["version"], meta["entry-points"]["grain_core"])
    return meta["name"]
