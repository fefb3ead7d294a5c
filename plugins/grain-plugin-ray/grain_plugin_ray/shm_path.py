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
    nbytes,
    shm_min_free_bytes,
    sweep_shm,
)

__all__ = ["ShmGroup", "ShmReceiver", "ShmSender", "forget_prefix", "remember_prefix"]

#: How long the pool waits for a killed actor's process to end before it sweeps its segments.
EXIT_WAIT_SECONDS = 5.0


#: Elements of a message are written in parts of about this many bytes, one segment each, so an
#: actor's segments keep one size (a message of a group can take the whole ``ahead_bytes``; segments
#: alternating between such sizes would be shrunk and grown, their pages freed and faulted again).
PART_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class ShmGroup:
    """An ``Elements`` message whose elements' large buffers lie in shared memory: per part of
    its elements, in order, ``(segment, payloads, layouts)`` as ``MessageWriter.finish`` made it."""

    seq: int
    generation: int
    state: Any
    skip: int
    parts: tuple[tuple[str | None, list[bytes], list[tuple]], ...]
    marks: tuple[Mark, ...] = ()


class ShmSender:
    """The actor's side (used under the actor endpoint's send lock, one thread at a time).

    ``encode(message, release)`` first frees the ``release`` oldest writer entries (of messages
    the consumer acknowledged), then writes an ``Elements`` message's elements, in parts of about
    :data:`PART_BYTES`, into free segments; it returns the message to send and how many writer
    entries it made (to release once it is acknowledged). Every ``Elements`` message passes
    through ``encode`` once, so the writer's entries stay in the outbox's order."""

    def __init__(self, prefix: str):
        self._writer = MessageWriter(prefix, shm_min_free_bytes())
        self.fallbacks = 0  # groups that went through the object store (ShmFullError)

    def encode(self, message: Elements, release: int) -> tuple[Any, int]:
        w = self._writer
        for _ in range(release):
            w.release_oldest()
        parts = []
        elements = message.elements
        start = 0
        try:
            while start < len(elements):
                end, size = start, 0
                while end < len(elements) and (end == start or size < PART_BYTES):
                    size += nbytes(elements[end])
                    end += 1
                w.add(elements[start:end])
                parts.append(w.finish())
                start = end
        except Exception as e:  # ShmFullError, or not picklable here (Ray's serializer says so)
            w.pass_through()
            self.fallbacks += isinstance(e, ShmFullError)
            return message, len(parts) + 1
        if all(name is None for name, _, _ in parts):  # no large buffer: the message as it is
            return message, len(parts)
        return ShmGroup(
            message.seq, message.generation, message.state, message.skip, tuple(parts),
            message.marks,
        ), len(parts)  # fmt: skip

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
        elements: list[Any] = []
        for name, payloads, layouts in message.parts:
            try:
                with self._lock:
                    (part,) = self._reader.read(name, payloads, layouts)
            except FileNotFoundError:
                raise OSError(
                    f"Ray actor {actor} reports the consumer's node id, but its shared-memory "
                    f"segment {name!r} is not in this process's /dev/shm (a container with its "
                    "own /dev/shm?); use RayRuntime(shared_memory=False)"
                ) from None
            elements.extend(part)
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
