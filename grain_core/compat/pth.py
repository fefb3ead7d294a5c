"""The ``.pth`` file that honours ``GRAIN_CORE_AS_GRAIN`` at interpreter start-up.

A ``.pth`` file in site-packages may hold one ``import`` line that Python runs at every start. Ours
reads the environment variable first and imports grain_core only when it is set, so Pythons started
without it pay nothing.
"""

from __future__ import annotations

import os
import sysconfig

__all__ = ["PTH_LINE", "PTH_NAME", "install_pth", "pth_path", "uninstall_pth"]

PTH_NAME = "grain_core_as_grain.pth"
PTH_LINE = (
    "import os; os.environ.get('GRAIN_CORE_AS_GRAIN', '').strip().lower() not in "
    "('', '0', 'false', 'no', 'off') and "
    "__import__('importlib').import_module('grain_core.compat.alias').install_from_env()\n"
)


def pth_path(site_dir: str | os.PathLike | None = None) -> str:
    """Where the ``.pth`` file goes: ``site_dir`` or this environment's site-packages."""
    base = os.fspath(site_dir) if site_dir is not None else sysconfig.get_paths()["purelib"]
    return os.path.join(base, PTH_NAME)


def install_pth(site_dir: str | os.PathLike | None = None) -> str:
    """Writes the ``.pth`` file; returns its path."""
    path = pth_path(site_dir)
    with open(path, "w") as f:
        f.write(PTH_LINE)
    return path


def uninstall_pth(site_dir: str | os.PathLike | None = None) -> bool:
    """Removes the ``.pth`` file; returns whether there was one."""
    try:
        os.remove(pth_path(site_dir))
    except FileNotFoundError:
        return False
    return True
