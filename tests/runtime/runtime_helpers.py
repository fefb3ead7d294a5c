"""Leak probes and the worker bound shared by the runtime tests."""

from __future__ import annotations

import os
import queue
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
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or while reading
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


class HeldEndpoint:
    """A transport for one :class:`api.WorkerLoop` in a thread, whose consumer returns only what
    the test credits: records every message and signals when the loop waits for a command with
    nothing it may produce (it only waits, with no timeout, at its bound or when idle)."""

    def __init__(self) -> None:
        self.commands: queue.Queue = queue.Queue()
        self.sent: list = []
        self.waiting = threading.Event()

    def send(self, message) -> None:
        self.sent.append(message)

    def receive(self, timeout):
        try:
            return self.commands.get_nowait()
        except queue.Empty:
            if timeout is not None:
                return None
        self.waiting.set()
        return self.commands.get()

    def produced(self) -> int:
        return sum(len(m.elements) for m in self.sent if isinstance(m, api.Elements))

    def command(self, message) -> None:
        """Sends ``message`` and waits until the loop has answered it and waits again."""
        self.waiting.clear()
        self.commands.put(message)
        assert self.waiting.wait(60), "the worker loop did not come to a stop"
