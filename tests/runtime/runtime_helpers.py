"""Leak probes and the worker bound shared by the runtime tests."""

from __future__ import annotations

import os
import threading

from grain_core.runtime import api, shm


def our_segments() -> list[str]:
    """Shared-memory segments made by this process's iterators (and their workers)."""
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"gcrt{os.getpid()}x")]


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except FileNotFoundError:
        return False
    return False


def ahead_bound(buffer: int, element_nbytes: int) -> int:
    """The most elements of ``element_nbytes`` bytes each that a worker may have produced (or be
    producing) and ``next()`` not returned: ``buffer + 1``, or more while they take under
    ``api.AHEAD_BYTES`` (it starts another only while the ones ahead take less)."""
    return max(buffer + 1, -(-api.AHEAD_BYTES // element_nbytes))


def runtime_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("grain_core-")]


__all__ = ["ahead_bound", "alive", "our_segments", "runtime_threads", "shm"]
