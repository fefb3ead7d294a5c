"""The credit channel of the process runtime: consumer -> worker, one per worker, on every platform.

The consumer returns flow-control counts (:class:`~grain_core.runtime.messages.Consumed`) and the
numbers of the messages it is done with to a worker as fixed 16-byte :class:`CreditRecord` s on a channel of their own,
written by whichever thread has one to send (the thread that calls ``next()``, or the pool's I/O
thread), never blocking. The channel is a ``socket.socketpair()`` (AF_UNIX where the platform has
it, a loopback TCP pair on Windows): waitable by :mod:`grain_core.runtime.waiting`, passed to
``forkserver`` and ``spawn`` workers alike by multiprocessing's own socket reducer, and written and
read with ``send`` / ``recv`` on non-blocking sockets (no raw file descriptor I/O).

Framing: a send of a few records either goes whole or not at all on Linux and macOS (one buffer
of a few bytes, below the socket's low-water mark); where a platform takes part of a send anyway,
:class:`CreditSender` keeps the rest and sends it before anything else (under its lock, so two
writers never interleave), so the worker always reads whole records in order.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import threading

__all__ = ["CreditReceiver", "CreditRecord", "CreditSender", "credit_channel"]


@dataclasses.dataclass(frozen=True)
class CreditRecord:
    """Consumer -> worker on the credit channel, packed as two little-endian int64 (16 bytes):
    ``(generation, elements)`` is :class:`~grain_core.runtime.messages.Consumed`; ``(-1, number)``
    says the consumer is done with the worker's element message ``number`` (copied out, or its
    lent arrays gone; in any order), so its shared-memory segment is free."""

    generation: int
    count: int

    FORMAT = struct.Struct("<qq")
    RELEASED = -1

    def pack(self) -> bytes:
        return self.FORMAT.pack(self.generation, self.count)


RECORD_SIZE = CreditRecord.FORMAT.size
_READ_BYTES = RECORD_SIZE * 4096


def credit_channel() -> tuple[socket.socket, CreditSender]:
    """A new channel: the worker's end (a socket, to pass in the worker's boot arguments) and the
    consumer's :class:`CreditSender`."""
    receive_end, send_end = socket.socketpair()
    send_end.setblocking(False)
    return receive_end, CreditSender(send_end)


class CreditSender:
    """The consumer's end. :meth:`write` never blocks; any thread may call it."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._tail = b""  # the unsent rest of a send the platform took only part of
        self._lock = threading.Lock()

    def write(self, data: bytes) -> bool:
        """Sends ``data`` (whole records) after any earlier rest. True when ``data`` is committed
        (sent, or its rest kept to go first next time); False when nothing of it was sent (the
        channel is full: the worker has not read for thousands of records). A worker that is gone
        counts as sent (its sentinel tells the consumer)."""
        with self._lock:
            tail = self._tail
            if tail:
                data = tail + data
            try:
                n = self.sock.send(data)
            except BlockingIOError:
                n = 0
            except OSError:
                self._tail = b""
                return True
            if n <= len(tail):  # nothing of ``data`` itself went
                self._tail = tail[n:]
                return False
            self._tail = data[n:]
            return True

    @property
    def pending(self) -> bool:
        """Whether part of a record waits to be sent (see :meth:`flush`)."""
        return bool(self._tail)

    def flush(self) -> bool:
        """Sends the rest of a partly taken send, if any; True when nothing is left."""
        if self._tail:
            self.write(b"")
        return not self._tail

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


class CreditReceiver:
    """The worker's end: :meth:`read` returns the whole records that have arrived."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        sock.setblocking(False)
        self._partial = b""

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list[tuple[int, int]]:
        """The ``(generation, count)`` pairs that have arrived, in order (empty when none has);
        raises ``EOFError`` when the consumer has closed its end."""
        try:
            data = self.sock.recv(_READ_BYTES)
        except BlockingIOError:
            return []
        except OSError as e:  # a reset connection (Windows) is a consumer that is gone
            raise EOFError("the consumer is gone") from e
        if not data:
            raise EOFError("the consumer is gone")
        if self._partial:
            data = self._partial + data
        end = len(data) - len(data) % RECORD_SIZE
        self._partial = data[end:]
        return list(CreditRecord.FORMAT.iter_unpack(data[:end]))

    def close(self) -> None:
        self.sock.close()
