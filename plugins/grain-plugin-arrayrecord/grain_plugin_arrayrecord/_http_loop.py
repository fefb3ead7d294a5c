"""The request loop of :mod:`~grain_plugin_arrayrecord.http_ranges` in Python: non-blocking sockets
watched by one ``select.epoll`` (``selectors`` where there is none) in the calling thread, for
platforms and builds without the C loop (:mod:`~grain_plugin_arrayrecord._http_native_loop`); the
same requests, bytes and errors (every ``http_ranges`` test runs with both)."""

from __future__ import annotations

import collections
import errno
import os
import select
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from grain_plugin_arrayrecord._http_shared import (
    Fallback,
    HTTPStatusError,
    LoopSettings,
    give_idle,
    status_error,
    take_idle,
    where,
)

__all__ = ["fetch"]

_MAX_HEAD = 65536
#: Room for an answer's head in front of its body in the one buffer both are received into, so
#: the body lands where it stays (a longer head costs one copy of what came with it).
_HEAD_ROOM = 4096


class Request:
    __slots__ = (
        *("i", "netloc", "addr", "target", "start", "end"),
        *("sock", "out", "buf", "got", "skip", "n", "reused", "keep"),
    )

    def __init__(self, i: int, to: tuple[str, tuple[str, int], str], start: int, end: int):
        self.i, (self.netloc, self.addr, self.target), self.start, self.end = i, to, start, end
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


def parse_head(req: Request, head: bytes, url: str) -> tuple[int, bool]:
    """``(body length, keep the connection)`` of a range answer; raises for other answers."""
    lines = head.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise ConnectionError(f"not an HTTP answer from {url}")
    status = int(status_line[1])
    if status != 206:
        raise status_error(status, url)
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    length = fields.get(b"content-length", b"")
    if (
        not length.isdigit()
        or b"transfer-encoding" in fields
        or fields.get(b"content-encoding", b"identity").lower() != b"identity"
    ):
        raise Fallback
    n = int(length)
    span = fields.get(b"content-range", b"").removeprefix(b"bytes ").split(b"/")[0].split(b"-")
    if len(span) != 2 or not (span[0].isdigit() and span[1].isdigit()):
        raise Fallback
    first, last = int(span[0]), int(span[1])
    if first != req.start or last >= req.end or n != last - first + 1:
        raise Fallback
    keep = status_line[0] == b"HTTP/1.1" and fields.get(b"connection", b"").lower() != b"close"
    return n, keep


class Poller:
    """What this loop needs of a selector, over ``select.epoll`` directly where there is one (a C
    call per change instead of ``selectors``' Python bookkeeping, twice per range), else over
    ``selectors.DefaultSelector``. ``reqs`` maps each registered socket's fd to its request;
    :meth:`select` gives ``(request, its socket then, mask)`` as of the call (``selectors``'
    ``EVENT_READ`` / ``EVENT_WRITE``; errors and hang-ups set both, as ``selectors`` does)."""

    def __init__(self) -> None:
        self.reqs: dict[int, Request] = {}
        self._ep = select.epoll() if hasattr(select, "epoll") else None
        self._sel = selectors.DefaultSelector() if self._ep is None else None

    def register(self, sock: socket.socket, event: int, req: Request, new: bool = True) -> None:
        fd = sock.fileno()
        self.reqs[fd] = req
        if self._ep is not None:
            flags = select.EPOLLIN if event == selectors.EVENT_READ else select.EPOLLOUT
            (self._ep.register if new else self._ep.modify)(fd, flags)
        else:
            assert self._sel is not None
            (self._sel.register if new else self._sel.modify)(sock, event, req)

    def modify(self, sock: socket.socket, event: int, req: Request) -> None:
        self.register(sock, event, req, new=False)

    def unregister(self, sock: socket.socket) -> None:
        del self.reqs[sock.fileno()]
        if self._ep is not None:
            self._ep.unregister(sock)
        else:
            assert self._sel is not None
            self._sel.unregister(sock)

    def select(self, timeout: float) -> list[tuple[Request, socket.socket | None, int]]:
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


def connect(req: Request, addresses: dict[tuple[str, int], Any]) -> socket.socket:
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


def fetch(
    urls: list[str],
    starts: list[int],
    ends: list[int],
    concurrency: int,
    settings: LoopSettings,
    on_range: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """One try at every range: each result is ``bytes``, an exception, or a ``Fallback``; with
    ``on_range``, a range's bytes go to ``on_range(i, data)`` as they arrive (the result is then
    ``None``)."""
    out: list[Any] = [None] * len(urls)
    pending: dict[str, collections.deque[Request]] = {}
    parsed: dict[str, tuple[str, tuple[str, int], str]] = {}
    for i, (u, s, e) in enumerate(zip(urls, starts, ends)):
        if e <= s:
            out[i] = b""
            continue
        found = parsed.get(u)
        if found is None:  # once per URL
            found = parsed[u] = where(u)
        req = Request(i, found, s, e)
        pending.setdefault(req.netloc, collections.deque()).append(req)
    left = sum(len(q) for q in pending.values())
    sel = Poller()
    open_ = sel.reqs
    addresses: dict[tuple[str, int], Any] = {}

    def send(req: Request, sock: socket.socket, registered: bool) -> None:
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

    def done(req: Request, result: Any) -> None:
        nonlocal left
        out[req.i] = result
        left -= 1

    opened_new = 0
    grown = False  # new connections up to ``concurrency`` (see settings.initial_connections)

    def begin(req: Request, sock: socket.socket | None) -> None:
        nonlocal opened_new
        req.reused = sock is not None
        try:
            if sock is None:
                opened_new += 1
                sock = connect(req, addresses)
            send(req, sock, False)
        except OSError as e:
            if sock is not None:
                sock.close()
            done(req, e)

    def fill() -> None:
        for queue in pending.values():
            while queue and len(open_) < concurrency:
                sock = take_idle(queue[0].netloc)
                if sock is None and not grown and opened_new >= settings.initial_connections and open_:
                    break  # more connections only once answers are slow
                begin(queue.popleft(), sock)

    def waiting() -> bool:
        return not grown and len(open_) < concurrency and any(pending.values())

    def drop(req: Request) -> None:
        sock, req.sock = req.sock, None
        assert sock is not None
        sel.unregister(sock)
        sock.close()

    fill()
    last = time.monotonic()
    try:
        while left:
            events = sel.select(settings.grow_after_s if waiting() else min(1.0, settings.timeout_s))
            if not events:
                if waiting() and time.monotonic() - last >= settings.grow_after_s:  # answers are slow
                    grown = True
                    fill()
                    continue
                if time.monotonic() - last > settings.timeout_s:  # bounded: fail what is left
                    for req in list(open_.values()):
                        drop(req)
                        done(req, TimeoutError(f"no answer in {settings.timeout_s} s"))
                    for queue in pending.values():
                        while queue:
                            done(queue.popleft(), TimeoutError(f"no answer in {settings.timeout_s} s"))
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
                        n, keep = parse_head(req, bytes(buf[:end]), urls[req.i])
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
                            give_idle(req.netloc, sock, settings.max_idle)
                        else:
                            sock.close()
                        fill()
                    if on_range is not None:  # after the next request went out
                        on_range(req.i, arrived)
                    continue
                except (BlockingIOError, InterruptedError):
                    continue
                except (Fallback, FileNotFoundError, HTTPStatusError) as e:  # an answer
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
                            send(req, connect(req, addresses), False)
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
