"""A lean HTTP/1.1 range server on one asyncio loop, for benchmarks that share the client's cores.

:class:`grain_core.testing.servers.RangeHTTPServer` runs a thread per connection and sleeps in it
for the latency: simple and close to a real server's behaviour for tests, but it costs the machine
about 0.1-0.2 ms of CPU per request (measured), CPU that a real object store never takes from the
reading machine. :class:`AsyncRangeServer` answers the same requests (``GET`` with or without one
``Range: bytes=a-b`` / ``a-`` / ``-n``, ``HEAD``; keep-alive; 404, 416, 501) from one event loop
thread: the latency is a timer (``loop.call_later``), and files are opened once (a handle per
request path, at most 4096, all closed at ``stop()``). A body goes out zero-copy: when the
connection has nothing buffered, the head is sent with ``MSG_MORE`` (so head and body leave in the
same segments) and the body by ``os.sendfile`` from the open file straight into the socket, with no
copy into Python and no buffer to allocate; only what the socket does not take at once (a full send
buffer) is read with ``os.pread`` and queued on the transport, which later answers then queue
behind, keeping their order. Per request, the head's ``Range`` and ``Connection`` are found by
searching it once lowered (no split per header line), and the idle timeout is one timer per
connection that moves on when it fires (no new timer per request). It serves a directory only,
counts requests, and injects no failures (use ``RangeHTTPServer`` in tests of retries).

Responses on one connection go out in the order of its requests (HTTP/1.1 pipelining is allowed
and kept in order). A request head over 64 KiB, or one with more than 100 header lines, is
answered 400 and the connection closed; a connection idle for 60 s is closed.

``python -m grain_core.testing.servers_asyncio DIRECTORY --latency 0.02`` prints ``port <n>``,
serves until stdin closes, then prints ``bytes <n>`` (body bytes sent) and ``requests <n>`` (as
``python -m grain_core.testing.servers`` prints ``requests <n>``, so a benchmark can run either).
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import socket
import threading
from typing import Any

from grain_core.testing.servers import serve_directory

__all__ = ["AsyncRangeServer"]

_RANGE = re.compile(rb"bytes=(\d*)-(\d*)$")
_MAX_HEAD = 65536
_MAX_HEADERS = 100
_IDLE_S = 60.0
_JOIN_TIMEOUT_S = 10.0
_REASONS = {200: b"OK", 206: b"Partial Content", 400: b"Bad Request", 404: b"Not Found"}
_REASONS.update({416: b"Range Not Satisfiable", 501: b"Not Implemented"})


class _Files:
    """File handles of a directory, opened on first use (names resolved inside it only)."""

    def __init__(self, directory: str):
        self.root = directory
        self._open: dict[bytes, tuple[int, int] | None] = {}

    def lookup(self, raw: bytes) -> tuple[int, int] | None:
        """``(fd, size)`` of the file named by request path ``raw``, or None."""
        if raw in self._open:
            return self._open[raw]
        name = raw.split(b"?", 1)[0].lstrip(b"/").decode("utf-8", "replace")
        path = os.path.realpath(os.path.join(self.root, name))
        found = None
        if path.startswith(self.root + os.sep) and os.path.isfile(path):
            fd = os.open(path, os.O_RDONLY)
            found = (fd, os.fstat(fd).st_size)
        if len(self._open) < 4096:
            self._open[raw] = found
        elif found is not None:  # too many names: do not keep more handles open
            os.close(found[0])
            return None
        return found

    def close(self) -> None:
        for found in self._open.values():
            if found is not None:
                os.close(found[0])
        self._open.clear()


def _header(head: bytes, low: bytes, key: bytes) -> bytes | None:
    """The value of the last header ``key`` (``b"\\r\\nname:"``, lower case) in ``head``."""
    i = low.rfind(key)
    if i < 0:
        return None
    end = head.find(b"\r\n", i + 2)
    return head[i + len(key) : end if end >= 0 else len(head)].strip()


class _Connection(asyncio.Protocol):
    def __init__(self, server: AsyncRangeServer):
        self._server = server
        self._buf = b""
        self._transport: Any = None
        self._queue: collections.deque[list[Any]] = collections.deque()  # [answer, close, due]
        self._close_after = False
        self._idle: asyncio.TimerHandle | None = None
        self._last = 0.0  # loop time of the last data received
        # The connection's socket, duplicated (the transport owns its own): sends with flags and
        # os.sendfile go to it while the transport has nothing buffered. Closed with the connection.
        self._sock: socket.socket | None = None

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self._server._transports[transport] = self
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._sock = socket.socket(fileno=os.dup(sock.fileno()))
            self._sock.setblocking(False)
        self._last = self._server._loop.time()
        self._idle = self._server._loop.call_later(_IDLE_S, self._check_idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._transports.pop(self._transport, None)
        if self._idle is not None:
            self._idle.cancel()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _check_idle(self) -> None:
        """Closes the connection after ``_IDLE_S`` without data; one timer per connection,
        moved on only when it fires (not rescheduled per request)."""
        left = self._last + _IDLE_S - self._server._loop.time()
        if left > 0:
            self._idle = self._server._loop.call_later(left, self._check_idle)
        else:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        self._buf += data
        self._last = self._server._loop.time()
        while not self._close_after:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > _MAX_HEAD:
                    self._later(self._head(400, 11, close=True) + b"bad request", close=True)
                return
            head, self._buf = self._buf[:end], self._buf[end + 4 :]
            self._request(head)

    def _request(self, head: bytes) -> None:
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or head.count(b"\r\n") > _MAX_HEADERS or len(head) > _MAX_HEAD:
            self._later(self._head(400, 11, close=True) + b"bad request", close=True)
            return
        method, target, version = parts
        low = head.lower()  # header names are case-insensitive; the last of a repeated one counts
        spec = _header(head, low, b"\r\nrange:")
        conn = _header(head, low, b"\r\nconnection:")
        close = version != b"HTTP/1.1" if conn is None else conn.lower() == b"close"
        server = self._server
        server.requests += 1
        if method not in (b"GET", b"HEAD"):
            self._later(self._head(501, 17, close=True) + b"only GET and HEAD", close=True)
            return
        found = server._files.lookup(target)
        if found is None:
            self._later(self._head(404, 9, close=close) + b"not found", close)
            return
        fd, size = found
        start, stop, code = 0, size, 200
        m = _RANGE.match(spec) if spec is not None else None
        if m is not None and (m.group(1) or m.group(2)):
            if m.group(1):
                start = int(m.group(1))
                stop = min(int(m.group(2)) + 1, size) if m.group(2) else size
            else:
                start = max(size - int(m.group(2)), 0)
            if start >= size or start >= stop:
                extra = b"Content-Range: bytes */%d\r\n" % size
                self._later(self._head(416, 0, close=close, extra=extra), close)
                return
            code = 206
        extra = b"Accept-Ranges: bytes\r\n"
        if code == 206:
            extra += b"Content-Range: bytes %d-%d/%d\r\n" % (start, stop - 1, size)
        head = self._head(code, stop - start, close=close, extra=extra)
        if method != b"GET":
            self._later(head, close)
            return
        server.bytes_sent += stop - start
        self._later((head, fd, start, stop - start), close)

    @staticmethod
    def _head(code: int, length: int, *, close: bool, extra: bytes = b"") -> bytes:
        conn = b"Connection: close\r\n" if close else b""
        return b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\n%s%s\r\n" % (
            code,
            _REASONS.get(code, b"Status"),
            length,
            extra,
            conn,
        )

    def _later(self, answer: bytes | tuple[bytes, int, int, int], close: bool) -> None:
        """Writes ``answer`` (bytes, or a head and ``(fd, offset, count)`` of a file's body) after
        the server's latency, after the connection's earlier answers."""
        if close:
            self._close_after = True
        entry = [answer, close, False]
        self._queue.append(entry)
        latency = self._server.latency_s
        if latency:
            self._server._loop.call_later(latency, self._due, entry)
        else:
            self._due(entry)

    def _due(self, entry: list[Any]) -> None:
        entry[2] = True
        queue, transport = self._queue, self._transport
        while queue and queue[0][2]:
            answer, close, _ = queue.popleft()
            if transport.is_closing():
                continue
            if type(answer) is tuple:
                if not self._send_file(*answer):  # the file shrank under the server: close
                    close = True
            else:
                transport.write(answer)
            if close:
                transport.close()

    def _send_file(self, head: bytes, fd: int, offset: int, count: int) -> bool:
        """Sends ``head`` and ``count`` bytes of file ``fd`` from ``offset``: straight from the
        file into the socket while the transport has nothing buffered, the rest through the
        transport. False when the file ended before ``count`` bytes (a short body was sent)."""
        transport, sock = self._transport, self._sock
        sent = 0
        if sock is not None and not transport.get_write_buffer_size():
            try:
                sent = sock.send(head, socket.MSG_MORE if count else 0)
                if sent == len(head):
                    while count:
                        n = os.sendfile(sock.fileno(), fd, offset, count)
                        if not n:  # end of file before count
                            return False
                        offset, count = offset + n, count - n
            except (BlockingIOError, InterruptedError):
                pass  # the socket's buffer is full: the rest goes through the transport
            except OSError:
                transport.close()  # the peer is gone (reset, broken pipe)
                return True
        if sent < len(head):
            transport.write(head[sent:])
        if count:
            rest = os.pread(fd, count, offset)
            transport.write(rest)
            return len(rest) == count
        return True


class AsyncRangeServer:
    """Serves ``directory`` over HTTP on ``127.0.0.1`` with byte ranges, from one asyncio loop in a
    background thread, each answer ``latency_s`` seconds after its request arrived.

    A context manager, like ``RangeHTTPServer``: ``url``, ``port``, ``requests`` (answered or
    scheduled so far) and ``bytes_sent`` (body bytes of those answers)."""

    def __init__(self, directory: str | os.PathLike, latency_s: float = 0.0):
        root = os.path.abspath(os.fspath(directory))
        if not os.path.isdir(root):
            raise NotADirectoryError(f"AsyncRangeServer: {root!r} is not a directory.")
        if latency_s < 0:
            raise ValueError(f"AsyncRangeServer: latency_s must be >= 0, got {latency_s}.")
        self.latency_s = float(latency_s)
        self.requests = 0
        self.bytes_sent = 0  # body bytes of GET answers
        self._files = _Files(root)
        self._transports: dict[Any, _Connection] = {}
        self._loop: Any = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    def start(self) -> AsyncRangeServer:
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        server = loop.run_until_complete(
            loop.create_server(lambda: _Connection(self), "127.0.0.1", 0, backlog=1024)
        )
        self._port = int(server.sockets[0].getsockname()[1])
        self._loop, self._server = loop, server
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("AsyncRangeServer is not started (use it in a with block).")
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stops serving, closes every connection and the files, and joins the loop's thread."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        loop = self._loop

        def shut() -> None:
            self._server.close()
            for t in list(self._transports):
                t.abort()  # now, unsent answers dropped; connection_lost runs before the stop
            loop.call_soon(loop.stop)

        loop.call_soon_threadsafe(shut)
        thread.join(_JOIN_TIMEOUT_S)
        if not thread.is_alive():
            for conn in list(self._transports.values()):  # none: each was aborted before the stop
                conn.connection_lost(None)
            loop.close()
        self._files.close()
        self._port = None

    def __enter__(self) -> AsyncRangeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m grain_core.testing.servers_asyncio DIR [--latency S]``: serves DIR until stdin
    closes."""
    serve_directory(AsyncRangeServer, argv)


if __name__ == "__main__":
    main()
