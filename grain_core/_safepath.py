"""The working directory stays off the import path of plugin discovery and of helper processes.

Python puts the working directory on ``sys.path`` for ``python -c``, ``python -m`` and the prompt
(as ``''`` or its absolute path), never for a script or a console script, and never with
``python -P``. A module plus a ``*.dist-info`` planted in a shared directory must not run because a
job was started there, so grain_core follows the process it runs in:

* :data:`STARTUP_PATH` is ``sys.path`` when grain_core was first imported (``grain_core/__init__``
  imports this module first), without the ``''`` that ``multiprocessing``'s ``python -c`` helpers
  start with; a helper that applies its parent's path declares it with :func:`adopt_parent_path`;
* plugin discovery scans :func:`discovery_path`: ``sys.path`` without entries that name the working
  directory, unless the working directory was already on :data:`STARTUP_PATH` (e.g. ``grain-core
  inspect module:name`` adds it to import the target; discovery still does not look there);
* a helper process grain_core starts runs ``python -P`` with :func:`child_environment`, whose
  ``PYTHONPATH`` is the parent's path, with the working directory only if the parent had it.

Worker processes of ``mp_prefetch`` apply the same rule (``grain_core.runtime``).
"""

from __future__ import annotations

import os
import sys

__all__ = [
    "STARTUP_PATH",
    "adopt_parent_path",
    "child_environment",
    "cwd_allowed",
    "discovery_path",
    "names_cwd",
]

def _started_by_multiprocessing() -> bool:
    """Whether this interpreter is a ``multiprocessing`` helper (forkserver or spawn child), whose
    ``python -c`` put the working directory on ``sys.path`` — not the parent's choice."""
    return sys.argv[:1] == ["-c"] and any(
        m in sys.modules for m in ("multiprocessing.forkserver", "multiprocessing.spawn")
    )


STARTUP_PATH: tuple[str, ...] = tuple(
    p for p in sys.path if not (p == "" and _started_by_multiprocessing())
)
_STARTUP_CWD = os.getcwd()


def adopt_parent_path(paths: list[str] | tuple[str, ...]) -> None:
    """Makes ``paths`` (the parent process's ``sys.path``) this process's startup path: a helper
    process that applies its parent's path calls this, so the working directory counts as allowed
    exactly when the parent had it."""
    global STARTUP_PATH
    STARTUP_PATH = tuple(paths)


def _resolve(entry: str, cwd: str) -> str:
    try:
        return os.path.realpath(os.path.join(cwd, entry) if entry in ("", ".") else entry)
    except (OSError, ValueError):
        return entry


def names_cwd(entry: str) -> bool:
    """Whether the ``sys.path`` entry ``entry`` is the current working directory."""
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed
        return entry in ("", ".")
    return entry in ("", ".") or _resolve(entry, cwd) == _resolve(cwd, cwd)


def cwd_allowed() -> bool:
    """Whether the working directory was on ``sys.path`` when this process imported grain_core."""
    try:
        cwd = _resolve(os.getcwd(), _STARTUP_CWD)
    except OSError:
        return False
    return any(_resolve(p, _STARTUP_CWD) == cwd for p in STARTUP_PATH)


def discovery_path() -> list[str]:
    """``sys.path`` as plugin discovery may scan it: without the working directory unless
    :func:`cwd_allowed`."""
    if cwd_allowed():
        return list(sys.path)
    return [p for p in sys.path if not names_cwd(p)]


def child_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a helper ``python -P ...`` process: ``env`` (default ``os.environ``) with
    ``PYTHONPATH`` set to :func:`discovery_path` as absolute paths, so the child imports what the
    parent can and nothing from the working directory the parent did not have."""
    out = dict(os.environ if env is None else env)
    cwd = os.getcwd()
    paths = [os.path.join(cwd, p) if p in ("", ".") else p for p in discovery_path()]
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    return out
