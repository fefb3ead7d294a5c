"""Moving elements from worker processes to the consumer through POSIX shared memory.

Contract:

* An element (any picklable PyTree) is pickled with protocol 5. Contiguous buffers of at least
  :data:`INBAND_LIMIT` bytes (numpy arrays' data) are taken *out of band*: they are written, aligned,
  into one shared-memory segment per message (``shm_open`` under ``/dev/shm``), never pickled.
  Smaller buffers stay in the pickle, where copying them is cheaper than a segment.
* The consumer copies every out-of-band buffer into a fresh, consumer-owned, writable numpy buffer
  and unlinks the segment at once (:func:`read_message`). Arrays handed to the user therefore never
  alias shared memory, and a segment lives only from ``finish`` in the worker to ``read_message`` in
  the consumer.
* Segment names start with a per-iterator prefix (:func:`new_prefix`); :func:`sweep` unlinks every
  segment with a prefix, so a closed iterator leaves nothing in ``/dev/shm`` even when messages were
  still in flight or a worker was killed mid-write.

Segments are created and unlinked with ``_posixshmem`` directly (what ``multiprocessing.shared_memory``
uses underneath) so no ``resource_tracker`` process is started and nothing is registered twice.
"""

from __future__ import annotations

import _posixshmem
import glob
import os
import pickle
import secrets
from typing import Any

import numpy as np

__all__ = ["INBAND_LIMIT", "MessageWriter", "discard", "new_prefix", "read_message", "sweep"]

INBAND_LIMIT = 1024
_ALIGN = 64
_SHM_DIR = "/dev/shm"
_CHUNK = 1 << 30

# (segment name or None, pickled elements, per element a tuple of (offset, nbytes) per buffer)
Message = tuple[str | None, list[bytes], list[tuple[tuple[int, int], ...]]]


def new_prefix() -> str:
    """A segment-name prefix unique to this process and call."""
    return f"gcrt{os.getpid()}x{secrets.token_hex(4)}"


class MessageWriter:
    """Collects elements for one message; ``finish`` writes their buffers into one segment."""

    def __init__(self, prefix: str):
        self._prefix = prefix
        self._seq = 0
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

    def finish(self) -> Message:
        """Writes the collected buffers into a new segment; returns the message and resets."""
        name = None
        if self._buffers:
            name = f"{self._prefix}_{self._seq}"
            self._seq += 1
            fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, max(self.nbytes, 1))
                for offset, raw in self._buffers:
                    _write_all(fd, raw, offset)
            finally:
                os.close(fd)
        msg = (name, self._payloads, self._layouts)
        self.reset()
        return msg


def _write_all(fd: int, raw: memoryview, offset: int) -> None:
    raw = raw.cast("B")
    done = 0
    while done < raw.nbytes:
        done += os.pwrite(fd, raw[done : done + _CHUNK], offset + done)


def _read_all(fd: int, out: np.ndarray, offset: int) -> None:
    view = memoryview(out)
    done = 0
    while done < out.nbytes:
        n = os.preadv(fd, [view[done : done + _CHUNK]], offset + done)
        if n <= 0:
            raise OSError(f"short read from shared memory at offset {offset + done}")
        done += n


def read_message(name: str | None, payloads: list[bytes], layouts: list[tuple]) -> list[Any]:
    """Returns the elements of a message, copying buffers out of the segment, then unlinks it."""
    if name is None:
        return [pickle.loads(p) for p in payloads]
    fd = _posixshmem.shm_open("/" + name, os.O_RDONLY, 0o600)
    try:
        out = []
        for data, layout in zip(payloads, layouts):
            buffers = []
            for offset, nbytes in layout:
                arr = np.empty(nbytes, dtype=np.uint8)
                _read_all(fd, arr, offset)
                buffers.append(arr)
            out.append(pickle.loads(data, buffers=buffers))
        return out
    finally:
        os.close(fd)
        discard(name)


def discard(name: str | None) -> None:
    """Unlinks a message's segment without reading it (a message from an outdated generation)."""
    if name is None:
        return
    try:
        _posixshmem.shm_unlink("/" + name)
    except FileNotFoundError:
        pass


def sweep(prefix: str) -> int:
    """Unlinks every segment whose name starts with ``prefix``; returns how many there were."""
    n = 0
    for path in glob.glob(os.path.join(_SHM_DIR, glob.escape(prefix) + "*")):
        try:
            os.unlink(path)
            n += 1
        except FileNotFoundError:
            pass
    return n
