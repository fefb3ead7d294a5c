"""What the two request loops of :mod:`~grain_plugin_arrayrecord.http_ranges` share: the settings of
one call (:class:`LoopSettings`), the errors they report, where a URL's requests go, and the
per-process pools of idle keep-alive connections (sockets for the Python loop, file descriptors for
the C loop), which a forked child starts without."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
from urllib.parse import urlsplit

__all__ = [
    "Fallback",
    "HTTPStatusError",
    "LoopSettings",
    "close_idle",
    "give_idle",
    "give_idle_fds",
    "status_error",
    "take_idle",
    "take_idle_fds",
    "where",
]


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """The knobs of one call, read from :mod:`http_ranges`' module attributes when it starts."""

    timeout_s: float  #: seconds without progress on any open connection before the open ranges fail
    max_idle: int  #: idle connections kept per server between calls
    initial_connections: int  #: new connections opened at first
    grow_after_s: float  #: ... more once no answer came for this long while ranges wait


class HTTPStatusError(OSError):
    """An HTTP answer of a failing status (``status``: 5xx, 408 or 429 are transient)."""

    def __init__(self, status: int, url: str):
        super().__init__(f"HTTP {status} for {url}")
        self.status = status


class Fallback(Exception):
    """An answer this client does not take as it is: fsspec reads the range."""


def status_error(status: int, url: str) -> Exception:
    """What an answer of ``status`` (not 206) to a range request of ``url`` becomes: ``404`` a
    ``FileNotFoundError``, ``5xx`` / ``408`` / ``429`` an :class:`HTTPStatusError` (transient),
    anything else a :class:`Fallback` (fsspec reads the range)."""
    if status == 404:
        return FileNotFoundError(url)
    if status >= 500 or status in (408, 429):
        return HTTPStatusError(status, url)
    return Fallback()


def where(url: str) -> tuple[str, tuple[str, int], str]:
    """``(netloc, (host, port), target)`` of a plain ``http://`` URL: where its requests go and the
    request target they name."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.netloc, (parts.hostname or "", parts.port or 80), target


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


def take_idle(netloc: str) -> socket.socket | None:
    """An idle socket to ``netloc`` kept by this process, if any (the caller owns it)."""
    with _LOCK:
        group = _IDLE.get((os.getpid(), netloc))
        return group.pop() if group else None


def give_idle(netloc: str, sock: socket.socket, max_idle: int) -> None:
    """Keeps ``sock`` for a later call while fewer than ``max_idle`` are kept for ``netloc``, else
    closes it."""
    with _LOCK:
        group = _IDLE.setdefault((os.getpid(), netloc), [])
        if len(group) < max_idle:
            group.append(sock)
            return
    sock.close()


def take_idle_fds(netloc: str) -> list[int]:
    """Every idle connection to ``netloc`` the C loop kept in this process (the caller owns them)."""
    with _LOCK:
        return _IDLE_FDS.pop((os.getpid(), netloc), [])


def give_idle_fds(netloc: str, fds: list[int], max_idle: int) -> None:
    """Keeps the C loop's idle connections ``fds`` up to ``max_idle`` per server; closes the rest."""
    with _LOCK:
        group = _IDLE_FDS.setdefault((os.getpid(), netloc), [])
        keep = fds[: max(0, max_idle - len(group))]
        group.extend(keep)
    for fd in fds[len(keep) :]:
        os.close(fd)
