"""Leak probes shared by the runtime tests."""

from __future__ import annotations

import os
import threading

from grain_core.runtime import shm


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


def runtime_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("grain_core-")]


__all__ = ["alive", "our_segments", "runtime_threads", "shm"]
