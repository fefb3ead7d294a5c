"""Moving elements from worker processes to the consumer through POSIX shared memory.

Contract:

* An element (any picklable PyTree) is pickled with protocol 5. Contiguous buffers of at least
  :data:`INBAND_LIMIT` bytes (numpy arrays' data) are taken *out of band*: they are written, aligned,
  into one shared-memory segment per message (``shm_open`` under ``/dev/shm``), never pickled.
  Smaller buffers stay in the pickle, where copying them is cheaper than a segment.
* The consumer either copies a message's out-of-band buffers into fresh, consumer-owned, writable
  numpy buffers, or *lends* them (:meth:`MessageReader.read` with a ``release`` callback): the
  arrays handed out are then writable views of the segment, and the segment goes back to its
  worker only when every array of the message is gone (garbage collected), so the worker never
  writes under an array the user holds. A reader lends a message whose buffers span at least
  :data:`LEND_MIN_BYTES` while what it has lent and not had back stays under its ``lend_bytes``;
  beyond, it copies (a user who keeps arrays cannot pin more than ``lend_bytes`` of segments).
* Segments are *pooled* per worker (:class:`MessageWriter`): a worker writes each message into one
  of its own segments and reuses that segment once the consumer is done with the message (copied
  out, or its lent arrays gone: :meth:`MessageWriter.release`, by the message's number) or the
  message became outdated (:meth:`MessageWriter.release_all`). A segment's pages are thus
  allocated once, not per message, and both sides keep their segments mapped (no ``shm_open`` /
  ``ftruncate`` / ``unlink`` per message). A worker has at most as many segments as it has
  messages in flight or lent.
* The reader unlinks a segment's name as soon as it has opened it (both sides then hold it; the
  memory goes when both are gone, however they end) and keeps the descriptor to follow a grown
  segment. Segment names start with a per-iterator prefix holding the consumer's pid
  (:func:`new_shm_prefix`); :func:`sweep_shm` unlinks every segment with a prefix (a closed
  iterator, an exiting worker), and :func:`reclaim_stale_shm` those whose consumer no longer runs
  (a job killed before the consumer opened them). :meth:`MessageReader.close` unmaps the consumer's mappings.
* Before a segment is created or grown, the writer checks that ``/dev/shm`` keeps
  :func:`shm_min_free_bytes` free, else raises :class:`ShmFullError` (nothing changed) so that the
  caller sends the elements another way. The pages a message is written to are allocated first
  (``posix_fallocate``), so when other processes (the other workers) took the room meanwhile, that
  is the same :class:`ShmFullError`, never a ``SIGBUS`` while writing.

Segments are created and unlinked with ``_posixshmem`` directly (what ``multiprocessing.shared_memory``
uses underneath) so no ``resource_tracker`` process is started and nothing is registered twice.

A runtime plugin whose workers share this host with the consumer (e.g. grain-plugin-ray's actors on
the consumer's node) moves elements the same way, under the same rules, through these names as
``grain_core.author`` re-exports them (``MessageWriter``, ``MessageReader``, ``ShmFullError``,
``new_shm_prefix``, ``sweep_shm``, ``reclaim_stale_shm``, ``shm_min_free_bytes``,
``SHM_AVAILABLE``; see docs/writing-plugins.md, "Shared memory for a runtime").
"""

from __future__ import annotations

import collections
import errno
import glob
import mmap
import os
import pickle
import re
import secrets
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

try:  # POSIX shared memory (Linux, macOS); elsewhere elements travel pickled through the pipe
    import _posixshmem
except ImportError:  # pragma: no cover  (Windows)
    _posixshmem = None  # type: ignore[assignment]

#: Whether this platform has POSIX shared memory (``shm_open``); without it ``mp_prefetch`` sends
#: elements pickled through its pipes.
SHM_AVAILABLE = _posixshmem is not None

__all__ = [
    "INBAND_LIMIT",
    "LEND_BYTES",
    "LEND_MIN_BYTES",
    "SHM_AVAILABLE",
    "MessageReader",
    "MessageWriter",
    "discard",
    "ShmFullError",
    "free_bytes",
    "lend_allowance",
    "shm_min_free_bytes",
    "new_shm_prefix",
    "reclaim_stale_shm",
    "sweep_shm",
]

INBAND_LIMIT = 1024
#: A message whose buffers span fewer bytes is copied out even by a lending reader: copying it is
#: cheap, and a lent segment stays pinned while the user holds any array of the message.
LEND_MIN_BYTES = 1 << 16
#: What the process runtime's reader may have lent and not had back, at most (and at most 1/8 of
#: ``/dev/shm``): beyond it, messages are copied out.
LEND_BYTES = 64 << 20
_ALIGN = 64
_SHM_DIR = "/dev/shm"
_GRANULE = 1 << 16  # segment sizes are rounded up to this (tmpfs allocates pages only when written)
_SHRINK_ABOVE = 4 << 20  # a free segment over this and over 4x what a message needs is shrunk
MIN_FREE_ENV = "GRAIN_CORE_SHM_MIN_FREE_MB"
DEFAULT_MIN_FREE_MB = 16.0
_NAME_RE = re.compile(r"^gcrt(\d+)x[0-9a-f]+")


class ShmFullError(OSError):
    """``/dev/shm`` has too little free space for a segment (see :func:`shm_min_free_bytes`)."""


# (segment name or None, pickled elements, per element a tuple of (offset, nbytes) per buffer)
Message = tuple[str | None, list[bytes], list[tuple[tuple[int, int], ...]]]


def new_shm_prefix() -> str:
    """A segment-name prefix unique to this process and call."""
    return f"gcrt{os.getpid()}x{secrets.token_hex(4)}"


def _round_up(n: int) -> int:
    return max(_GRANULE, -(-n // _GRANULE) * _GRANULE)


class _Segment:
    """One pooled segment of a worker, kept open and mapped (``size`` bytes)."""

    def __init__(self, name: str, size: int):
        self.name = name
        self.fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        self.size = 0
        self.reserved = 0  # bytes from the start whose pages are allocated (see reserve)
        self.map: mmap.mmap | None = None
        self.view: memoryview | None = None
        self.resize(size)

    def resize(self, size: int) -> None:
        self._unmap()
        os.ftruncate(self.fd, size)
        self.size = size
        self.reserved = min(self.reserved, size)
        self.map = mmap.mmap(self.fd, size)
        self.view = memoryview(self.map)

    def reserve(self, nbytes: int) -> None:
        """Allocates the pages of the first ``nbytes`` bytes, so writing them cannot fault; raises
        :class:`ShmFullError` when ``/dev/shm`` has no room for them."""
        if nbytes <= self.reserved:
            return
        try:
            os.posix_fallocate(self.fd, self.reserved, nbytes - self.reserved)
        except OSError as e:
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # no fallocate here: write as before
                self.reserved = self.size
                return
            raise ShmFullError(
                f"/dev/shm has no room for a {nbytes >> 20} MiB segment ({e.strerror})"
            ) from None
        self.reserved = nbytes

    def _unmap(self) -> None:
        if self.view is not None:
            self.view.release()
            self.view = None
        if self.map is not None:
            self.map.close()
            self.map = None

    def close(self) -> None:
        self._unmap()
        try:
            os.close(self.fd)
        except OSError:
            pass
        discard(self.name)


class MessageWriter:
    """Collects elements for one message; ``finish`` writes their buffers into a pooled segment.

    Messages are numbered in the order they are finished (or passed through) from 0;
    :attr:`messages` is the number the next one gets. The owner tells the writer when the consumer
    is done with a message: ``release(number)`` (copied out, or its lent arrays gone, in any
    order), ``release_oldest`` (the oldest message still held) and ``release_all`` (every message
    sent so far is outdated or read)."""

    def __init__(self, prefix: str, min_free: int = 0):
        self._prefix = prefix
        self._min_free = min_free
        self._seq = 0
        self._free: list[_Segment] = []
        # Per message in flight or lent, by number, oldest first: its segment (None: it had none).
        self._busy: dict[int, _Segment | None] = {}
        self.messages = 0
        self.reset()

    def reset(self) -> None:
        self._payloads: list[bytes] = []
        self._layouts: list[tuple[tuple[int, int], ...]] = []
        self._buffers: list[tuple[int, memoryview]] = []
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._payloads)

    def add(self, element: Any) -> None:
        """Pickles ``element``, keeping its large contiguous buffers for the segment."""
        taken: list[memoryview] = []

        def callback(buf: pickle.PickleBuffer) -> bool:
            try:
                raw = buf.raw()
            except BufferError:  # not contiguous: pickle it in band
                return True
            if raw.nbytes < INBAND_LIMIT:
                return True
            taken.append(raw)
            return False

        try:
            data = pickle.dumps(element, protocol=5, buffer_callback=callback)
        except Exception:
            import cloudpickle

            taken.clear()
            data = cloudpickle.dumps(element, protocol=5, buffer_callback=callback)
        layout = []
        for raw in taken:
            offset = -(-self.nbytes // _ALIGN) * _ALIGN
            self._buffers.append((offset, raw))
            layout.append((offset, raw.nbytes))
            self.nbytes = offset + raw.nbytes
        self._payloads.append(data)
        self._layouts.append(tuple(layout))

    def _check_room(self, grow: int) -> None:
        if self._min_free <= 0 or grow <= 0:
            return
        free = free_bytes()
        if free is not None and free - grow < self._min_free:
            raise ShmFullError(
                f"/dev/shm has {free >> 20} MiB free; a {grow >> 20} MiB segment would leave less "
                f"than {self._min_free >> 20} MiB ({MIN_FREE_ENV})"
            )

    def _segment(self, nbytes: int) -> _Segment:
        """A free segment of at least ``nbytes`` (grown, shrunk or created as needed); raises
        :class:`ShmFullError` (changing nothing) when ``/dev/shm`` lacks the room."""
        if self._free:
            # The smallest free segment that is big enough, else the largest one (grown).
            fits = [s for s in self._free if s.size >= nbytes]
            seg = min(fits, key=lambda s: s.size) if fits else max(self._free, key=lambda s: s.size)
            if seg.size < nbytes:
                size = _round_up(max(nbytes, 2 * seg.size))
                self._check_room(size - seg.size)
                self._free.remove(seg)
                seg.resize(size)
                return seg
            self._free.remove(seg)
            if seg.size > _SHRINK_ABOVE and seg.size > 4 * nbytes:
                seg.resize(_round_up(nbytes))
            return seg
        self._check_room(_round_up(nbytes))
        name = f"{self._prefix}_{self._seq}"
        self._seq += 1
        return _Segment(name, _round_up(nbytes))

    def finish(self) -> Message:
        """Writes the collected buffers into a free segment; returns the message and resets. The
        segment stays in use until ``release_oldest`` / ``release_all``."""
        seg = None
        if self._buffers:
            seg = self._segment(self.nbytes)
            try:
                seg.reserve(self.nbytes)
            except ShmFullError:
                self._free.append(seg)
                raise
            view = seg.view
            assert view is not None
            for offset, raw in self._buffers:
                raw = raw.cast("B")
                view[offset : offset + raw.nbytes] = raw
        self._busy[self.messages] = seg
        self.messages += 1
        msg = (None if seg is None else seg.name, self._payloads, self._layouts)
        self.reset()
        return msg

    def pass_through(self) -> None:
        """Records a message sent without a segment (elements pickled whole), so that
        ``release_oldest`` still pairs with messages in order. Drops what was collected."""
        self.reset()
        self._busy[self.messages] = None
        self.messages += 1

    def release(self, number: int) -> None:
        """The consumer is done with message ``number``: its segment is free again (a number not
        held, e.g. released twice, changes nothing)."""
        seg = self._busy.pop(number, None)
        if seg is not None:
            self._free.append(seg)

    def release_oldest(self) -> None:
        """The consumer is done with the oldest message still held: its segment is free again."""
        if self._busy:
            self.release(next(iter(self._busy)))

    def release_all(self) -> None:
        """Every message sent so far is read or outdated: all segments are free again."""
        while self._busy:
            self.release_oldest()

    def close(self) -> None:
        """Unmaps, closes and unlinks every segment of this writer."""
        self.reset()
        self.release_all()
        for seg in self._free:
            seg.close()
        self._free.clear()


class MessageReader:
    """The consumer side: opens each worker segment once, unlinks its name at once (both sides now
    hold it, so nothing is left in ``/dev/shm`` if either dies) and keeps it mapped; copies a
    message's buffers out into fresh arrays, or lends them (see :meth:`read`) while what it has
    lent and not had back stays under ``lend_bytes`` (0, the default: it always copies)."""

    def __init__(self, lend_bytes: int = 0) -> None:
        # name -> (fd, mapping or None, uint8 array over it or None)
        self._maps: dict[str, tuple[int, mmap.mmap | None, np.ndarray | None]] = {}
        self.lend_bytes = lend_bytes
        self.lent = 0  # bytes lent and not had back, as of the last read
        # Bytes of lent messages whose arrays are gone: appended by their finalizers (in whatever
        # thread drops the last array, or the garbage collector), drained by ``read``.
        self._returned: collections.deque[int] = collections.deque()

    def _mapping(self, name: str, end: int) -> np.ndarray:
        entry = self._maps.get(name)
        if entry is not None and entry[2] is not None and entry[2].nbytes >= end:
            return entry[2]
        if entry is None:
            fd = _posixshmem.shm_open("/" + name, os.O_RDWR, 0o600)
            # Kept before the name is unlinked: an interrupt (Ctrl-C, a signal handler's
            # exception) after the unlink must not lose the only way back to the segment, since
            # a message interrupted while read is read again.
            self._maps[name] = (fd, None, None)
            discard(name)  # both sides have it open now
        else:  # the worker grew the segment: map it again
            fd = entry[0]
            self._unmap(name)
            self._maps[name] = (fd, None, None)
        size = os.fstat(fd).st_size
        if size < end:
            raise OSError(
                f"shared-memory segment {name!r} is smaller than its message ({end} bytes)"
            )
        m = mmap.mmap(fd, size)  # writable: lent arrays are the user's to write
        arr = np.frombuffer(m, dtype=np.uint8)
        self._maps[name] = (fd, m, arr)
        return arr

    def _unmap(self, name: str) -> None:
        entry = self._maps.get(name)
        if entry is None:
            return
        fd, m, arr = entry
        self._maps[name] = (fd, None, None)
        del entry, arr  # our array is the mapping's only export ...
        if m is not None:
            try:
                m.close()
            except BufferError:  # ... unless another thread is copying from it (close() racing
                pass  # a read): the mapping is then unmapped when that copy drops it.

    def _forget(self, name: str) -> None:
        self._unmap(name)
        entry = self._maps.pop(name, None)
        if entry is not None:
            try:
                os.close(entry[0])
            except OSError:
                pass

    def read(
        self,
        name: str | None,
        payloads: list[bytes],
        layouts: list[tuple],
        release: Callable[[], None] | None = None,
    ) -> list[Any]:
        """Returns the elements of a message.

        Without ``release``, its buffers are copied out of the segment. With it, the message is
        *lent* when its buffers span at least :data:`LEND_MIN_BYTES` and fit under ``lend_bytes``
        with what is lent already: its arrays are then writable views of the segment, and
        ``release()`` is called once every one of them is gone; otherwise the buffers are copied
        and ``release()`` is called before this returns. ``release`` must not block or take a
        lock: it may run in any thread, inside the garbage collector (appending to a deque is
        right). It is called only for a message this returns (not when unpickling fails or is
        interrupted: a message read again is released once)."""
        if name is None:
            out = [pickle.loads(p) for p in payloads]
            if release is not None:
                release()
            return out
        end = max((o + n for layout in layouts for o, n in layout), default=0)
        seg = self._mapping(name, end)
        returned = self._returned
        while returned:
            self.lent -= returned.popleft()
        start = min((o for layout in layouts for o, _ in layout), default=end)
        span = end - start
        if (
            release is None
            or span < LEND_MIN_BYTES
            or self.lent + span > self.lend_bytes
        ):
            out = []
            for data, layout in zip(payloads, layouts):
                buffers = [seg[o : o + n].copy() for o, n in layout]
                out.append(pickle.loads(data, buffers=buffers))
            if release is not None:
                release()
            return out
        mapping = self._maps[name][1]
        assert mapping is not None  # mapped by _mapping above
        # A block made from a memoryview of the mapping: every array the unpickling makes views it
        # (numpy keeps the block as their base), so the block dies with the last of them; it also
        # holds an export of the mapping, which therefore stays mapped until then.
        block = np.frombuffer(memoryview(mapping)[start:end], dtype=np.uint8)
        out = []
        for data, layout in zip(payloads, layouts):
            buffers = [block[o - start : o - start + n] for o, n in layout]
            out.append(pickle.loads(data, buffers=buffers))
        self.lent += span
        weakref.finalize(block, _returned, returned, span, release).atexit = False
        return out

    def close(self) -> None:
        """Unmaps and closes every segment (idempotent)."""
        for name in list(self._maps):
            self._forget(name)


def _returned(returned: collections.deque[int], span: int, release: Callable[[], None]) -> None:
    """A lent message's last array is gone: its bytes are back, its segment is the worker's."""
    returned.append(span)
    release()


def discard(name: str | None) -> None:
    """Unlinks a segment (idempotent)."""
    if name is None:
        return
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass


def free_bytes() -> int | None:
    """Bytes free in ``/dev/shm`` for an unprivileged writer (None when it cannot be told)."""
    try:
        st = os.statvfs(_SHM_DIR)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def lend_allowance() -> int:
    """The ``lend_bytes`` of a runtime's :class:`MessageReader`: :data:`LEND_BYTES`, and at most 1/8
    of what ``/dev/shm`` has free now (0 when that cannot be told)."""
    free = free_bytes()
    return 0 if free is None else min(LEND_BYTES, free // 8)


def shm_min_free_bytes() -> int:
    """Bytes that must stay free in ``/dev/shm`` after a segment is sized: ``GRAIN_CORE_SHM_MIN_FREE_MB``
    MiB (default 16). Below it elements travel pickled through the pipe instead."""
    raw = os.environ.get(MIN_FREE_ENV, "")
    try:
        mib = float(raw) if raw else DEFAULT_MIN_FREE_MB
    except ValueError:
        raise ValueError(f"{MIN_FREE_ENV} must be a number of MiB, got {raw!r}.") from None
    return int(max(0.0, mib) * (1 << 20))


def reclaim_stale_shm() -> int:
    """Unlinks segments of this user whose creating process (the pid in the name) is gone: what a
    job killed before both sides had opened a segment left behind. Returns how many."""
    n = 0
    uid = os.getuid()
    try:
        names = os.listdir(_SHM_DIR)
    except OSError:
        return 0
    for name in names:
        m = _NAME_RE.match(name)
        if m is None:
            continue
        pid = int(m.group(1))
        try:
            os.kill(pid, 0)
            continue  # alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # someone else's live process
        path = os.path.join(_SHM_DIR, name)
        try:
            if os.stat(path).st_uid == uid:
                os.unlink(path)
                n += 1
        except OSError:
            pass
    return n


def sweep_shm(prefix: str) -> int:
    """Unlinks every segment whose name starts with ``prefix``; returns how many there were."""
    n = 0
    for path in glob.glob(os.path.join(_SHM_DIR, glob.escape(prefix) + "*")):
        try:
            os.unlink(path)
            n += 1
        except FileNotFoundError:
            pass
    return n
