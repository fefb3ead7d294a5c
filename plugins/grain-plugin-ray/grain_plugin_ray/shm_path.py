"""The one-host path: elements of actors on the consumer's Ray node travel through shared memory.

Through Ray's object store, every group an actor returns is copied into the store (with page faults
on store pages the actor had not touched yet) and released by reference counting over the raylet.
An actor on the consumer's own node (same Ray node id) instead writes a group's large buffers
(numpy arrays' data, at least ``INBAND_LIMIT`` bytes each) into one of its pooled POSIX
shared-memory segments, with the kernel's transport of ``mp_prefetch``
(``grain_core.author.MessageWriter`` / ``MessageReader``), and its ``fetch`` returns only a small
:class:`ShmGroup` (the pickles of the elements without those buffers, and where the buffers lie).
The rules are ``mp_prefetch``'s:

* The consumer copies every buffer out into fresh, writable arrays that it owns
  (:meth:`ShmReceiver.decode`), before it acknowledges the group; nothing handed to the user
  aliases shared memory.
* A segment is reused by its actor once the consumer acknowledged the group in it (the next
  ``fetch(acked)``): an actor has at most one segment per group not acknowledged, and the groups
  it holds are bounded by its worker loop (``per_worker_buffer_size``, ``RayRuntime.ahead_bytes``).
* Segment names carry a prefix made by the consumer per actor (``new_shm_prefix``, with the
  consumer's pid). The consumer unlinks each name as soon as it opened it; the names of segments
  it never opened are unlinked by ``sweep_shm(prefix)`` once the actor's process is gone (the pool's
  ``close``, a replaced actor) and at interpreter exit; those of a consumer killed outright by
  ``reclaim_stale_shm`` when a later pool starts.
* When ``/dev/shm`` lacks room (``ShmFullError``) a group travels through the object store instead.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
import time
from typing import Any

from grain_core.author import (
    SHM_AVAILABLE,
    Elements,
    Mark,
    MessageReader,
    MessageWriter,
    ShmFullError,
    shm_min_free_bytes,
    sweep_shm,
)

__all__ = ["ShmGroup", "ShmReceiver", "ShmSender", "forget_prefix", "remember_prefix"]

#: How long the pool waits for a killed actor's process to end before it sweeps its segments.
EXIT_WAIT_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class ShmGroup:
    """An ``Elements`` message whose elements' large buffers lie in shared-memory ``segment``."""

    seq: int
    generation: int
    state: Any
    skip: int
    segment: str | None
    payloads: list[bytes]
    layouts: list[tuple]
    marks: tuple[Mark, ...] = ()


class ShmSender:
    """The actor's side (used under the actor endpoint's send lock, one thread at a time).

    ``encode`` writes an ``Elements`` message into a free segment; ``release(n)`` frees the
    segments of the ``n`` oldest encoded messages (acknowledged by the consumer) before the next
    write. Every ``Elements`` message passes through ``encode`` once, so the writer's messages in
    flight stay in the outbox's order."""

    def __init__(self, prefix: str):
        self._writer = MessageWriter(prefix, shm_min_free_bytes())
        self.fallbacks = 0  # groups that went through the object store (ShmFullError)

    def encode(self, message: Elements, release: int) -> Any:
        w = self._writer
        for _ in range(release):
            w.release_oldest()
        try:
            w.add(message.elements)
            name, payloads, layouts = w.finish()
        except ShmFullError:
            w.pass_through()
            self.fallbacks += 1
            return message
        except Exception:  # not picklable here: the object store's serializer reports it
            w.pass_through()
            return message
        if name is None:  # no large buffer in it: the message as it is
            return message
        return ShmGroup(
            message.seq, message.generation, message.state, message.skip, name, payloads,
            layouts, message.marks,
        )  # fmt: skip

    def close(self) -> None:
        self._writer.close()


class ShmReceiver:
    """The consumer's side: one reader for every actor of a pool (used from the consumer's
    thread; ``close`` from any)."""

    def __init__(self) -> None:
        self._reader = MessageReader()
        self._lock = threading.Lock()

    def decode(self, message: Any, actor: str) -> Any:
        """``message`` with a :class:`ShmGroup` read back into an ``Elements`` of fresh arrays."""
        if not isinstance(message, ShmGroup):
            return message
        try:
            with self._lock:
                (elements,) = self._reader.read(message.segment, message.payloads, message.layouts)
        except FileNotFoundError:
            raise OSError(
                f"Ray actor {actor} reports the consumer's node id, but its shared-memory segment "
                f"{message.segment!r} is not in this process's /dev/shm (a container with its own "
                "/dev/shm?); use RayRuntime(shared_memory=False)"
            ) from None
        return Elements(
            message.seq, message.generation, message.state, message.skip, elements, message.marks
        )

    def close(self) -> None:
        with self._lock:
            self._reader.close()


def usable() -> bool:
    """Whether this platform has POSIX shared memory."""
    return bool(SHM_AVAILABLE)


def wait_gone(pids: list[int], timeout: float = EXIT_WAIT_SECONDS) -> None:
    """Waits (bounded) until none of ``pids`` runs: a killed actor may still be writing."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:  # pragma: no cover - not ours
                break
            time.sleep(0.005)


# Prefixes of this process's pools not swept yet: swept at interpreter exit too.
_PREFIXES: set[str] = set()
_PREFIX_LOCK = threading.Lock()


def remember_prefix(prefix: str) -> None:
    with _PREFIX_LOCK:
        _PREFIXES.add(prefix)


def forget_prefix(prefix: str) -> None:
    """Unlinks what is left of ``prefix`` in ``/dev/shm`` and forgets it."""
    sweep_shm(prefix)
    with _PREFIX_LOCK:
        _PREFIXES.discard(prefix)


@atexit.register
def _sweep_at_exit() -> None:
    with _PREFIX_LOCK:
        prefixes = list(_PREFIXES)
        _PREFIXES.clear()
    for prefix in prefixes:
        try:
            sweep_shm(prefix)
        except Exception:  # pragma: no cover - interpreter exit
            pass
