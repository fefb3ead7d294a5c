"""Checks that a plugin distribution is installed, discovered and listed, and releases its files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from importlib.metadata import version

from grain_core._safepath import child_environment


def check_plugin_listed(entry_point: str, distribution: str, provides: Iterable[str]) -> None:
    """Asserts that ``python -m grain_core plugins --json`` (a fresh process, so real entry-point
    discovery) lists ``entry_point`` from ``distribution`` at its installed version, loaded, providing
    at least ``provides``."""
    out = subprocess.run(  # -P: the working directory is not on the child's path (see _safepath)
        [sys.executable, "-P", "-m", "grain_core", "plugins", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=child_environment({**os.environ, "GRAIN_CORE_STRICT_PLUGINS": ""}),
    ).stdout
    rows = {row["name"]: row for row in json.loads(out)}
    assert entry_point in rows, f"plugin {entry_point!r} is not listed; listed: {sorted(rows)}"
    row = rows[entry_point]
    assert row["distribution"] == distribution, row
    assert row["version"] == version(distribution), row
    assert row["status"] == "loaded", f"{entry_point}: {row['status']} {row['error']}"
    missing = set(provides) - set(row["provides"])
    assert not missing, f"{entry_point} does not provide {sorted(missing)}; it provides {row['provides']}"


def open_file_count(name_part: str) -> int | None:
    """How many of this process's open file descriptors point at paths containing ``name_part``;
    None where the platform does not expose them (no ``/proc/self/fd``)."""
    fd_dir = "/proc/self/fd"
    if not os.path.isdir(fd_dir):
        return None
    n = 0
    for fd in os.listdir(fd_dir):
        try:
            n += name_part in os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            pass
    return n
