"""Byte ranges of plain ``http://`` URLs over keep-alive sockets from one thread (no aiohttp).

fsspec's HTTP filesystem runs every range request through aiohttp on its event loop thread, about
0.2 ms of client CPU per request; a shuffled read of small records makes one request per few
records, so that cost bounds the rate. :func:`read_ranges` sends the same ``GET`` with a ``Range``
header over non-blocking sockets watched by one loop in the calling thread, keeps the connections
open between calls (a bounded per-process pool), and parses only what a range answer needs
(status, ``Content-Length``, ``Content-Range``, ``Connection``). The loop runs in C where the
plugin's ``_http_native`` accelerator is built (:data:`NATIVE`; Linux, ``epoll``, the GIL released
while it runs: :func:`_fetch_native`), else in Python (``select.epoll`` where there is one, else
``selectors``: :func:`_fetch`); both follow every rule below. A call opens at most
:data:`INITIAL_CONNECTIONS` new connections, more once answers are slow (:data:`GROW_AFTER_S`).

It is used only where it changes nothing but the cost (:func:`usable`): fsspec's
``HTTPFileSystem`` made without options (no headers, auth or client arguments, which this client
would not send) and a plain ``http://`` URL of printable ASCII. Every answer it does not take as it
is (a redirect, a ``200`` whole body, ``416``, chunked or encoded bodies, any other 4xx) reads that
range again through fsspec's ``cat_ranges`` (``grain_core``'s ``read_ranges``, with its retries),
so the records and the errors are fsspec's. A ``404`` is a ``FileNotFoundError``; connection
errors, timeouts and ``5xx``/``408``/``429`` are transient: only those ranges are tried again, with
the retry policy's backoff, at most ``retry.attempts`` tries in all, then an ``OSError`` names the
file and the range. Waits are bounded: no progress on any connection for :data:`TIMEOUT_S` fails
the ranges still open with ``TimeoutError``. A connection reused from the pool that the server had
closed is replaced once by a fresh one (not counted as a try).

Copies: an answer is received into one buffer of the range's length plus room for its head
(:data:`_HEAD_ROOM`), so the body lands in place from the socket and is handed on as that buffer
without the head (no copy: a ``bytearray`` with its front dropped in Python, a ``memoryview`` of
the C loop's buffer); only a head longer than the room costs one copy of the body bytes that came
with it.

Memory: each range's body is at most its requested length (a longer answer is refused), answer
heads at most 64 KiB, at most ``concurrency`` connections open per call and
:data:`MAX_IDLE` kept idle per server.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from grain_core.author import RetryPolicy, retry_ranges
from grain_core.author import read_ranges as fsspec_read_ranges

try:  # the request loop in C (_http_native.c: Linux, built where a C compiler was present)
    from grain_plugin_arrayrecord import _http_native

    _native: Any = _http_native if hasattr(_http_native, "Fetch") else None
except ImportError:  # pragma: no cover - built without a compiler, or not on Linux
    _native = None

__all__ = [
    "ENABLED",
    "GROW_AFTER_S",
    "INITIAL_CONNECTIONS",
    "MAX_IDLE",
    "NATIVE",
    "TIMEOUT_S",
    "close_idle",
    "read_ranges",
    "usable",
]

#: Whether the request loop runs in C (the ``_http_native`` accelerator; it releases the GIL
#: while it waits, sends and receives), else in Python; the same requests, bytes and errors.
NATIVE = _native is not None

#: Set to False to send every request through fsspec instead.
ENABLED = True
#: Seconds without progress on any open connection before the open ranges fail (transient).
TIMEOUT_S = 30.0
#: Idle keep-alive connections kept per server between calls.
MAX_IDLE = 128
#: New connections a call opens at first (besides idle ones it reuses); more, up to its
#: ``concurrency``, once no answer came for :data:`GROW_AFTER_S` while ranges wait: a quick server
#: is served by a few reused connections (each new one costs both sides a connection set-up), a
#: slow one (latency) gets them all after a millisecond.
INITIAL_CONNECTIONS = 8
GROW_AFTER_S = 0.001
_MAX_HEAD = 65536
#: Room for an answer's head in front of its body in the one buffer both are received into, so
#: the body lands where it stays (a longer head costs one copy of what came with it).
_HEAD_ROOM = 4096

_LOCK = threading.Lock()
_IDLE: dict[tuple[int, str], list[socket.socket]] = {}  # (pid, host:port) -> idle sockets
_IDLE_FDS: dict[tuple[int, str], list[int]] = {}  # the same for the C loop: file descriptors


def _after_fork_in_child() -> None:
    """A forked child starts with its own lock (another thread of the parent may have held the
    parent's at the fork) and no kept connections (they are the parent's; the child's copies of
    the C loop's descriptors are closed, the sockets' close when collected)."""
    global _LOCK, _IDLE, _IDLE_FDS
    fds = [fd for group in _IDLE_FDS.values() for fd in group]
    _LOCK, _IDLE, _IDLE_FDS = threading.Lock(), {}, {}
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class HTTPStatusError(OSError):
    """An HTTP answer of a failing status (``status``: 5xx, 408 or 429 are transient)."""

    def __init__(self, status: int, url: str):
        super().__init__(f"HTTP {status} for {url}")
        self.status = status


class _Fallback(Exception):
    """An answer this client does not take as it is: fsspec reads the range."""


def usable(fs: Any, path: str) -> bool:
    """Whether ranges of ``path`` in ``fs`` may go through this client (see the module doc)."""
    if not ENABLED or not path.startswith("http://") or "#" in path:
        return False
    if not all(32 < ord(ch) < 127 for ch in path) or "@" in urlsplit(path).netloc:
        return False  # fsspec quotes such paths / sends the user and password as auth
    try:
        from fsspec.implementations.http import HTTPFileSystem
    except ImportError:  # pragma: no cover - fsspec's HTTP needs aiohttp
        return False
    return (
        type(fs) is HTTPFileSystem
        and not getattr(fs, "client_kwargs", None)
        and not getattr(fs, "kwargs", None)
    )


def close_idle() -> None:
    """Closes the idle connections kept for later calls."""
    with _LOCK:
        socks = [s for group in _IDLE.values() for s in group]
        fds = [fd for group in _IDLE_FDS.values() for fd in group]
        _IDLE.clear()
        _IDLE_FDS.clear()
    for s in socks:
        s.close()
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _take_idle(netloc: str) -> socket.socket | None:
    with _LOCK:
        group = _IDLE.get((os.getpid(), netloc))
        return group.pop() if group else None


def _give_idle(netloc: str, sock: socket.socket) -> None:
    with _LOCK:
        group = _IDLE.setdefault((os.getpid(), netloc), [])
        if len(group) < MAX_IDLE:
            group.append(sock)
            return
    sock.close()


class _Request:
    __slots__ = (
        *("i", "netloc", "addr", "target", "start", "end"),
        *("sock", "out", "buf", "got", "skip", "n", "reused", "keep"),
    )

    def __init__(self, i: int, where: tuple[str, tuple[str, int], str], start: int, end: int):
        self.i, (self.netloc, self.addr, self.target), self.start, self.end = i, where, start, end
        self.sock: socket.socket | None = None
        self.out = b""
        # The answer goes into ``buf``: the head first; once it is parsed, the body is
        # ``buf[skip : skip + n]`` (``skip`` is -1 before) and ``got`` counts its bytes received
        # (before: the bytes of ``buf`` received).
        self.buf: bytearray | None = None
        self.got = self.n = 0
        self.skip = -1
        self.reused = False  # on a connection that answered before (the server may have shut it)
        self.keep = False  # the server keeps the connection open after this answer


def _parse_head(req: _Request, head: bytes, url: str) -> tuple[int, bool]:
    """``(body length, keep the connection)`` of a range answer; raises for other answers."""
    lines = head.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ConnectionError(f"not an HTTP answer from {url}")
    status = int(status_line[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    if status == 404:
        raise FileNotFoundError(url)
    if status >= 500 or status in (408, 429):
        raise HTTPStatusError(status, url)
    length = fields.get(b"content-length", b"")
    if (
        status != 206
        or not length.isdigit()
        or b"transfer-encoding" in fields
        or fields.get(b"content-encoding", b"identity").lower() != b"identity"
    ):
        raise _Fallback
    n = int(length)
    span = fields.get(b"content-range", b"").removeprefix(b"bytes ").split(b"/")[0].split(b"-")
    if len(span) != 2 or not (span[0].isdigit() and span[1].isdigit()):
        raise _Fallback
    first, last = int(span[0]), int(span[1])
    if first != req.start or last >= req.end or n != last - first + 1:
        raise _Fallback
    keep = status_line[0] == b"HTTP/1.1" and fields.get(b"connection", b"").lower() != b"close"
    return n, keep


class _Poller:
    """What this loop needs of a selector, over ``select.epoll`` directly where there is one (a C
    call per change instead of ``selectors``' Python bookkeeping, twice per range), else over
    ``selectors.DefaultSelector``. ``reqs`` maps each registered socket's fd to its request;
    :meth:`select` gives ``(request, its socket then, mask)`` as of the call (``selectors``'
    ``EVENT_READ`` / ``EVENT_WRITE``; errors and hang-ups set both, as ``selectors`` does)."""

    def __init__(self) -> None:
        self.reqs: dict[int, _Request] = {}
        self._ep = select.epoll() if hasattr(select, "epoll") else None
        self._sel = selectors.DefaultSelector() if self._ep is None else None

    def register(self, sock: socket.socket, event: int, req: _Request, new: bool = True) -> None:
        fd = sock.fileno()
        self.reqs[fd] = req
        if self._ep is not None:
            flags = select.EPOLLIN if event == selectors.EVENT_READ else select.EPOLLOUT
            (self._ep.register if new else self._ep.modify)(fd, flags)
        else:
            assert self._sel is not None
            (self._sel.register if new else self._sel.modify)(sock, event, req)

    def modify(self, sock: socket.socket, event: int, req: _Request) -> None:
        self.register(sock, event, req, new=False)

    def unregister(self, sock: socket.socket) -> None:
        del self.reqs[sock.fileno()]
        if self._ep is not None:
            self._ep.unregister(sock)
        else:
            assert self._sel is not None
            self._sel.unregister(sock)

    def select(self, timeout: float) -> list[tuple[_Request, socket.socket | None, int]]:
        reqs = self.reqs
        if self._ep is None:
            assert self._sel is not None
            return [(k.data, k.data.sock, m) for k, m in self._sel.select(timeout)]
        out = []
        for fd, ev in self._ep.poll(timeout):
            req = reqs.get(fd)
            if req is not None:
                mask = selectors.EVENT_READ if ev & ~select.EPOLLOUT else 0
                if ev & ~select.EPOLLIN:
                    mask |= selectors.EVENT_WRITE
                out.append((req, req.sock, mask))
        return out

    def close(self) -> None:
        (self._ep or self._sel).close()  # type: ignore[union-attr]


def _connect(req: _Request, addresses: dict[tuple[str, int], Any]) -> socket.socket:
    """A non-blocking socket connecting to ``req``'s server (the connect completes later)."""
    if req.addr not in addresses:
        addresses[req.addr] = socket.getaddrinfo(*req.addr, type=socket.SOCK_STREAM)[0]
    family, kind, proto, _, addr = addresses[req.addr]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = sock.connect_ex(addr)
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
            raise ConnectionError(err, f"connecting to {req.netloc}: {os.strerror(err)}")
    except BaseException:
        sock.close()
        raise
    return sock


def _where(url: str) -> tuple[str, tuple[str, int], str]:
    """``(netloc, (host, port), target)`` of a plain ``http://`` URL: where its requests go and the
    request target they name."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.netloc, (parts.hostname or "", parts.port or 80), target


def _fetch(
    urls: list[str],
    starts: list[int],
    ends: list[int],
    concurrency: int,
    on_range: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """One try at every range: each result is ``bytes``, an exception, or a ``_Fallback``; with
    ``on_range``, a range's bytes go to ``on_range(i, data)`` as they arrive (the result is then
    ``None``)."""
    out: list[Any] = [None] * len(urls)
    pending: dict[str, collections.deque[_Request]] = {}
    parsed: dict[str, tuple[str, tuple[str, int], str]] = {}
    for i, (u, s, e) in enumerate(zip(urls, starts, ends)):
        if e <= s:
            out[i] = b""
            continue
        where = parsed.get(u)
        if where is None:  # once per URL
            where = parsed[u] = _where(u)
        req = _Request(i, where, s, e)
        pending.setdefault(req.netloc, collections.deque()).append(req)
    left = sum(len(q) for q in pending.values())
    sel = _Poller()
    open_ = sel.reqs
    addresses: dict[tuple[str, int], Any] = {}

    def send(req: _Request, sock: socket.socket, registered: bool) -> None:
        req.sock, req.buf, req.got, req.skip = sock, None, 0, -1
        req.out = (
            f"GET {req.target} HTTP/1.1\r\nHost: {req.netloc}\r\n"
            f"Range: bytes={req.start}-{req.end - 1}\r\nAccept-Encoding: identity\r\n\r\n"
        ).encode("ascii")
        event = selectors.EVENT_WRITE
        if req.reused:  # connected: the request (a few hundred bytes) usually goes out at once
            try:
                req.out = req.out[sock.send(req.out) :]
            except OSError:  # would block, or the server shut it: the write event tells
                pass
            if not req.out:
                event = selectors.EVENT_READ
        if registered:
            sel.modify(sock, event, req)
        else:
            sel.register(sock, event, req)

    def done(req: _Request, result: Any) -> None:
        nonlocal left
        out[req.i] = result
        left -= 1

    opened_new = 0
    grown = False  # new connections up to ``concurrency`` (see INITIAL_CONNECTIONS)

    def begin(req: _Request, sock: socket.socket | None) -> None:
        nonlocal opened_new
        req.reused = sock is not None
        try:
            if sock is None:
                opened_new += 1
                sock = _connect(req, addresses)
            send(req, sock, False)
        except OSError as e:
            if sock is not None:
                sock.close()
            done(req, e)

    def fill() -> None:
        for queue in pending.values():
            while queue and len(open_) < concurrency:
                sock = _take_idle(queue[0].netloc)
                if sock is None and not grown and opened_new >= INITIAL_CONNECTIONS and open_:
                    break  # more connections only once answers are slow
                begin(queue.popleft(), sock)

    def waiting() -> bool:
        return not grown and len(open_) < concurrency and any(pending.values())

    def drop(req: _Request) -> None:
        sock, req.sock = req.sock, None
        assert sock is not None
        sel.unregister(sock)
        sock.close()

    fill()
    last = time.monotonic()
    try:
        while left:
            events = sel.select(GROW_AFTER_S if waiting() else min(1.0, TIMEOUT_S))
            if not events:
                if waiting() and time.monotonic() - last >= GROW_AFTER_S:  # answers are slow
                    grown = True
                    fill()
                    continue
                if time.monotonic() - last > TIMEOUT_S:  # bounded: fail what is left
                    for req in list(open_.values()):
                        drop(req)
                        done(req, TimeoutError(f"no answer in {TIMEOUT_S} s"))
                    for queue in pending.values():
                        while queue:
                            done(queue.popleft(), TimeoutError(f"no answer in {TIMEOUT_S} s"))
                continue
            last = time.monotonic()
            for req, sock, mask in events:
                if sock is None or req.sock is not sock:  # finished earlier this round
                    continue
                try:
                    if mask & selectors.EVENT_WRITE:
                        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if err:
                            raise ConnectionError(err, os.strerror(err))
                        req.out = req.out[sock.send(req.out) :]
                        if not req.out:
                            sel.modify(sock, selectors.EVENT_READ, req)
                        continue
                    buf = req.buf
                    if req.skip < 0:  # the head is not in yet
                        if buf is None:  # head and body are received into one buffer
                            buf = req.buf = bytearray(req.end - req.start + _HEAD_ROOM)
                        elif req.got == len(buf):  # a long head: more room (it is bounded)
                            if len(buf) > _MAX_HEAD + req.end - req.start:
                                raise ConnectionError(f"an answer head over 64 KiB: {urls[req.i]}")
                            buf.extend(bytes(_MAX_HEAD))
                        got = sock.recv_into(memoryview(buf)[req.got :])
                        if not got:
                            raise ConnectionError(f"{req.netloc} closed the connection")
                        end = buf.find(b"\r\n\r\n", max(0, req.got - 3), req.got + got)
                        req.got += got
                        if end < 0:
                            continue
                        n, keep = _parse_head(req, bytes(buf[:end]), urls[req.i])
                        skip, rest = end + 4, req.got - end - 4
                        if rest > n:  # more than the body: not an answer to this request
                            raise ConnectionError(f"{urls[req.i]} sent more than the range")
                        if skip + n > len(buf):  # the head took the body's room: a new buffer
                            body = bytearray(n)
                            body[:rest] = memoryview(buf)[skip : skip + rest]
                            req.buf = buf = body
                            skip = 0
                        req.skip, req.n, req.got, req.keep = skip, n, rest, keep
                    else:
                        got = sock.recv_into(memoryview(buf)[req.skip + req.got : req.skip + req.n])
                        if not got:
                            raise ConnectionError(f"{req.netloc} closed the connection")
                        req.got += got
                    if req.got < req.n:
                        continue
                    assert buf is not None
                    del buf[req.skip + req.n :]  # the body alone, without copying it: a
                    del buf[: req.skip]  # bytearray drops its front by moving its start
                    arrived = buf
                    done(req, arrived if on_range is None else None)  # not copied once more
                    queue = pending[req.netloc]
                    req.sock = None
                    if req.keep and queue:  # keep-alive: the next range of this server
                        nxt = queue.popleft()
                        nxt.reused = True
                        send(nxt, sock, True)
                    else:
                        sel.unregister(sock)
                        if req.keep:
                            _give_idle(req.netloc, sock)
                        else:
                            sock.close()
                        fill()
                    if on_range is not None:  # after the next request went out
                        on_range(req.i, arrived)
                    continue
                except (BlockingIOError, InterruptedError):
                    continue
                except (_Fallback, FileNotFoundError, HTTPStatusError) as e:  # an answer
                    if req.sock is None:  # raised by on_range: the caller's error
                        raise
                    drop(req)
                    done(req, e)
                except OSError as e:  # the connection failed
                    if req.sock is None:  # raised by on_range: the caller's error
                        raise
                    drop(req)
                    if req.reused and req.skip < 0 and not req.got:
                        req.reused = False  # the server had shut it: once more, fresh
                        try:
                            send(req, _connect(req, addresses), False)
                        except OSError as again:
                            done(req, again)
                        continue
                    done(req, e)
                fill()
    finally:
        for req in list(open_.values()):
            if req.sock is not None:
                req.sock.close()
        sel.close()
    return out


def _native_error(code: int, url: str, netloc: str) -> Exception:
    """The exception (or ``_Fallback``) of the Python loop for the C loop's failure ``code``."""
    n = _native
    if code > 0:  # an HTTP status other than 206
        if code == 404:
            return FileNotFoundError(url)
        if code >= 500 or code in (408, 429):
            return HTTPStatusError(code, url)
        return _Fallback()
    if code == n.ERR_FALLBACK:
        return _Fallback()
    if code == n.ERR_CLOSED:
        return ConnectionError(f"{netloc} closed the connection")
    if code == n.ERR_NOT_HTTP:
        return ConnectionError(f"not an HTTP answer from {url}")
    if code == n.ERR_TOO_MUCH:
        return ConnectionError(f"{url} sent more than the range")
    if code == n.ERR_LONG_HEAD:
        return ConnectionError(f"an answer head over 64 KiB: {url}")
    if code == n.ERR_TIMEOUT:
        return TimeoutError(f"no answer in {TIMEOUT_S} s")
    return OSError(-code, os.strerror(-code))  # the errno's own subclass (ConnectionResetError...)


#: The C loop hands control back at least this often (seconds), so a ``Ctrl-C`` is handled.
_NATIVE_WAIT_S = 0.1


def _fetch_native(
    urls: list[str],
    starts: list[int],
    ends: list[int],
    concurrency: int,
    on_range: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """:func:`_fetch` with the request loop in C (``_http_native.Fetch``): the same requests and
    results (a range's bytes are a ``memoryview`` of the buffer they were received into)."""
    out: list[Any] = [None] * len(urls)
    servers: dict[str, int] = {}
    server_args: list[tuple[int, str, int, str, list[int]]] = []
    parsed: dict[str, tuple[int, bytes]] = {}
    requests: list[tuple[int, bytes, int, int]] = []
    which: list[int] = []  # request number -> range number
    try:
        for i, (u, s, e) in enumerate(zip(urls, starts, ends)):
            if e <= s:
                out[i] = b""
                continue
            where = parsed.get(u)
            if where is None:  # (server, target), once per URL
                netloc, (host, port), target = _where(u)
                k = servers.get(netloc)
                if k is None:
                    family, _, _, _, addr = socket.getaddrinfo(
                        host, port, type=socket.SOCK_STREAM
                    )[0]
                    k = servers[netloc] = len(server_args)
                    server_args.append((int(family), addr[0], addr[1], netloc, []))
                where = parsed[u] = (k, target.encode("ascii"))
            requests.append((where[0], where[1], s, e))
            which.append(i)
    except OSError as e:  # the name does not resolve: every range fails (transient, as in _fetch)
        return [b"" if e_ <= s_ else e for s_, e_ in zip(starts, ends)]
    if not requests:
        return out
    for netloc, k in servers.items():
        with _LOCK:
            server_args[k][4].extend(_IDLE_FDS.pop((os.getpid(), netloc), ()))
    fetch = _native.Fetch(
        server_args,
        requests,
        concurrency,
        TIMEOUT_S,
        MAX_IDLE,
        INITIAL_CONNECTIONS,
        GROW_AFTER_S,
    )
    netlocs = list(servers)
    try:
        while fetch.left:
            for r, result in fetch.run(_NATIVE_WAIT_S):
                i = which[r]
                if isinstance(result, int):
                    out[i] = _native_error(result, urls[i], netlocs[requests[r][0]])
                elif on_range is None:
                    out[i] = result
                else:
                    on_range(i, result)
    finally:
        for netloc, fds in zip(netlocs, fetch.idle()):
            with _LOCK:
                group = _IDLE_FDS.setdefault((os.getpid(), netloc), [])
                keep = fds[: max(0, MAX_IDLE - len(group))]
                group.extend(keep)
            for fd in fds[len(keep) :]:
                os.close(fd)
        fetch.close()
    return out


def read_ranges(
    fs: Any,
    paths: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    *,
    retry: RetryPolicy,
    concurrency: int,
    on_range: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """The bytes ``[starts[i], ends[i])`` of URL ``paths[i]`` (each :func:`usable` with ``fs``;
    ``bytearray`` or ``bytes``), with the contract of ``grain_core``'s ``read_ranges``:
    concurrent, transient failures retried (only those ranges, ``retry``'s backoff, at most
    ``retry.attempts`` tries), an ``OSError`` naming the file and range for a range that fails for
    good, ``FileNotFoundError`` at once; answers this client does not take are read through ``fs``
    instead. With ``on_range``, each range's bytes go to ``on_range(i, data)`` once, as soon as
    they are in (so the caller's work overlaps the wait for the others, and a range's bytes are
    not kept), and the list holds ``None``; an error ``on_range`` raises ends the call."""
    paths, starts, ends = list(paths), [int(s) for s in starts], [int(e) for e in ends]
    fallback: list[int] = []

    def one_try(todo: list[int]) -> list[Any]:
        def arrived(k: int, data: Any) -> None:
            assert on_range is not None
            on_range(todo[k], data)

        got = (_fetch if _native is None else _fetch_native)(
            [paths[i] for i in todo],
            [starts[i] for i in todo],
            [ends[i] for i in todo],
            concurrency,
            None if on_range is None else arrived,
        )
        for i, r in zip(todo, got):
            if isinstance(r, _Fallback):
                fallback.append(i)
        return [None if isinstance(r, _Fallback) else r for r in got]

    out = retry_ranges(one_try, paths, starts, ends, retry)
    if fallback:
        datas = fsspec_read_ranges(
            fs,
            [paths[i] for i in fallback],
            [starts[i] for i in fallback],
            [ends[i] for i in fallback],
            retry=retry,
            concurrency=concurrency,
        )
        for i, data in zip(fallback, datas):
            if on_range is None:
                out[i] = data
            else:
                on_range(i, data)
    return out
