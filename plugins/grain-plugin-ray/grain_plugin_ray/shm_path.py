"""The one-host path: elements of actors on the consumer's Ray node travel through shared memory.

Through Ray's object store, every group an actor returns is copied into the store (with page faults
on store pages the actor had not touched yet) and released by reference counting over the raylet.
An actor on the consumer's own node (same Ray node id) instead writes a group's large buffers
(numpy arrays' data, at least ``INBAND_LIMIT`` bytes each) into one of its pooled POSIX
shared-memory segments, with the kernel's transport of ``mp_prefetch``
(``grain_core.author.MessageWriter`` / ``MessageReader``), and its ``fetch`` returns only a small
:class:`ShmGroup` (the pickles of the elements without those buffers, and where the buffers lie).
The rules are ``mp_prefetch``'s:

* The consumer lends a large part's buffers (``MessageReader(lend_bytes=lend_allowance())``): the
  arrays handed to the user are writable views of the segment, and the part's number goes back to
  its actor (with the consumer's next ``fetch``) once every array of it is gone and its group is
  acknowledged (:class:`Lending`); small parts, and parts past the allowance, are copied into
  fresh arrays and go back with the acknowledgement.
* A segment is reused by its actor once the consumer has given the part in it back; the parts of a
  group the consumer never reads (the group went through the object store after all) go back when
  the group is acknowledged (the next ``fetch(acked)``). An actor has at most one segment per part
  not given back, bounded by its worker loop (``per_worker_buffer_size``,
  ``RayRuntime.ahead_bytes``) and the consumer's lending allowance.
* Segment names carry a prefix made by the consumer per actor (``new_shm_prefix``, with the
  consumer's pid). The consumer unlinks each name as soon as it opened it; the names of segments
  it never opened are unlinked by ``sweep_shm(prefix)`` once the actor's process is gone (the pool's
  ``close``, a replaced actor) and at interpreter exit; those of a consumer killed outright by
  ``reclaim_stale_shm`` when a later pool starts.
* When ``/dev/shm`` lacks room (``ShmFullError``) a group travels through the object store instead.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import functools
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from grain_core.author import (
    SHM_AVAILABLE,
    Elements,
    Mark,
    MessageReader,
    MessageWriter,
    ShmFullError,
    lend_allowance,
    nbytes,
    shm_min_free_bytes,
    sweep_shm,
)

__all__ = [
    "Lending",
    "ShmGroup",
    "ShmReceiver",
    "ShmSender",
    "forget_prefix",
    "remember_prefix",
]

#: How long the pool waits for a killed actor's process to end before it sweeps its segments.
EXIT_WAIT_SECONDS = 5.0


#: Elements of a message are written in parts of about this many bytes, one segment each, so an
#: actor's segments keep one size (a message of a group can take the whole ``ahead_bytes``; segments
#: alternating between such sizes would be shrunk and grown, their pages freed and faulted again).
PART_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class ShmGroup:
    """An ``Elements`` message whose elements' large buffers lie in shared memory: per part of
    its elements, in order, ``(segment, payloads, layouts)`` as ``MessageWriter.finish`` made it,
    and the writer's number of each part (``numbers``), which the consumer gives back."""

    seq: int
    generation: int
    state: Any
    skip: int
    parts: tuple[tuple[str | None, list[bytes], list[tuple]], ...]
    numbers: tuple[int, ...]
    marks: tuple[Mark, ...] = ()


class ShmSender:
    """The actor's side (used under the actor endpoint's send lock, one thread at a time).

    ``encode(message, release)`` first frees the writer entries numbered in ``release`` (parts
    the consumer gave back, and those of acknowledged messages it never read), then writes an
    ``Elements`` message's elements, in parts of about :data:`PART_BYTES`, into free segments; it
    returns the message to send and the numbers of the writer entries to free once the message is
    acknowledged (those of a message sent as it is; an :class:`ShmGroup`'s parts come back from
    the consumer instead)."""

    def __init__(self, prefix: str):
        self._writer = MessageWriter(prefix, shm_min_free_bytes())
        self.fallbacks = 0  # groups that went through the object store (ShmFullError)

    def encode(self, message: Elements, release: Iterable[int]) -> tuple[Any, list[int]]:
        w = self._writer
        for number in release:
            w.release(number)
        parts = []
        numbers = []
        elements = message.elements
        start = 0
        try:
            while start < len(elements):
                end, size = start, 0
                while end < len(elements) and (end == start or size < PART_BYTES):
                    size += nbytes(elements[end])
                    end += 1
                w.add(elements[start:end])
                number = w.messages
                parts.append(w.finish())
                numbers.append(number)
                start = end
        except Exception as e:  # ShmFullError, or not picklable here (Ray's serializer says so)
            numbers.append(w.messages)
            w.pass_through()
            self.fallbacks += isinstance(e, ShmFullError)
            return message, numbers
        if all(name is None for name, _, _ in parts):  # no large buffer: the message as it is
            return message, numbers
        return ShmGroup(
            message.seq, message.generation, message.state, message.skip, tuple(parts),
            tuple(numbers), message.marks,
        ), []  # fmt: skip

    def close(self) -> None:
        self._writer.close()


class Lending:
    """The consumer's account of one actor's parts: which are out (read, their arrays not all
    gone) and which may go back.

    Each read of a part gets its own token (:meth:`lend`); the callback it returns may be called
    more than once (by the part's finalizer, and by a read that failed): a token is settled once.
    A part read twice (a ``fetch`` result read again after an interruption) goes back once the
    arrays of both reads are gone, and only once the message holding it is acknowledged (a
    message not acknowledged may come again with the next ``fetch`` and be read from its segment
    again). Used from the consumer's thread, except the callbacks, which a lent part's finalizer
    calls (any thread): they only append to a deque."""

    def __init__(self) -> None:
        self._returned: collections.deque[tuple[int, int]] = collections.deque()
        self._out: dict[int, set[int]] = {}  # part number -> tokens of its reads still out
        self._seq: dict[int, int] = {}  # part number -> seq of the message holding it
        self._free: list[tuple[int, int]] = []  # (seq, number): arrays back, not acknowledged
        self._tokens = itertools.count()

    def lend(self, number: int, seq: int) -> Callable[[], None]:
        """Part ``number`` of message ``seq`` is about to be read: the callback to give that read
        back with (called by the read's finalizer; call it when the read fails)."""
        token = next(self._tokens)
        self._out.setdefault(number, set()).add(token)
        self._seq[number] = seq
        return functools.partial(self._returned.append, (number, token))

    def ready(self, acked: int) -> list[int]:
        """The numbers of the parts whose every read has its arrays back, of messages up to seq
        ``acked`` (the others stay until their message is acknowledged). They stay ready until
        :meth:`given`: a call that sends them and is interrupted before ``given`` sends them again
        next time, which the actor ignores (a number is freed once)."""
        returned, out = self._returned, self._out
        while returned:
            number, token = returned.popleft()
            tokens = out.get(number)
            if tokens is None:
                continue
            tokens.discard(token)
            if not tokens:
                del out[number]
                self._free.append((self._seq.pop(number), number))
        return [number for seq, number in self._free if seq <= acked]

    def given(self, numbers: list[int]) -> None:
        """``numbers`` (from :meth:`ready`) went to the actor."""
        if numbers:
            sent = set(numbers)
            self._free = [(seq, number) for seq, number in self._free if number not in sent]


class ShmReceiver:
    """The consumer's side: one reader for every actor of a pool (used from the consumer's
    thread; ``close`` from any)."""

    def __init__(self) -> None:
        self._reader = MessageReader(lend_bytes=lend_allowance())
        self._lock = threading.Lock()

    def decode(self, message: Any, actor: str, lending: Lending) -> Any:
        """``message`` with a :class:`ShmGroup` read back into an ``Elements``: lent views of its
        large parts (copies of the others), each given back through ``lending``."""
        if not isinstance(message, ShmGroup):
            return message
        elements: list[Any] = []
        for (name, payloads, layouts), number in zip(message.parts, message.numbers):
            release = lending.lend(number, message.seq)
            try:
                with self._lock:
                    (part,) = self._reader.read(name, payloads, layouts, release)
            except BaseException as e:
                release()  # this read holds nothing
                if not isinstance(e, FileNotFoundError):
                    raise
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
