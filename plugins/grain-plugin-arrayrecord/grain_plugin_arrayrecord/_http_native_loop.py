"""The request loop of :mod:`~grain_plugin_arrayrecord.http_ranges` in C: Python's side of the
``_http_native`` accelerator (Linux, built where a C compiler was present; ``AVAILABLE`` says
whether it is). ``_http_native.Fetch`` runs one ``epoll`` with the GIL released while it waits,
sends and receives; this module hands it the servers, requests and kept connections, and maps
its results and failure codes to what the Python loop gives (:mod:`._http_loop`)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from grain_plugin_arrayrecord._http_shared import (
    Fallback,
    LoopSettings,
    give_idle_fds,
    status_error,
    take_idle_fds,
    where,
)

try:
    from grain_plugin_arrayrecord import _http_native  # type: ignore[attr-defined]

    AVAILABLE = hasattr(_http_native, "Fetch")
except ImportError:  # pragma: no cover - built without a compiler, or not on Linux
    _http_native = None
    AVAILABLE = False

__all__ = ["AVAILABLE", "fetch"]


def _error(code: int, url: str, netloc: str, timeout_s: float) -> Exception:
    """The exception (or ``Fallback``) of the Python loop for the C loop's failure ``code``."""
    n = _http_native
    if code > 0:  # an HTTP status other than 206
        return status_error(code, url)
    if code == n.ERR_FALLBACK:
        return Fallback()
    if code == n.ERR_CLOSED:
        return ConnectionError(f"{netloc} closed the connection")
    if code == n.ERR_NOT_HTTP:
        return ConnectionError(f"not an HTTP answer from {url}")
    if code == n.ERR_TOO_MUCH:
        return ConnectionError(f"{url} sent more than the range")
    if code == n.ERR_LONG_HEAD:
        return ConnectionError(f"an answer head over 64 KiB: {url}")
    if code == n.ERR_TIMEOUT:
        return TimeoutError(f"no answer in {timeout_s} s")
    return OSError(-code, os.strerror(-code))  # the errno's own subclass (ConnectionResetError...)


#: The C loop hands control back at least this often (seconds), so a ``Ctrl-C`` is handled.
_NATIVE_WAIT_S = 0.1


def fetch(
    urls: list[str],
    starts: list[int],
    ends: list[int],
    concurrency: int,
    settings: LoopSettings,
    on_range: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``_http_loop.fetch`` with the request loop in C (``_http_native.Fetch``): the same requests and
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
            found = parsed.get(u)
            if found is None:  # (server, target), once per URL
                netloc, (host, port), target = where(u)
                k = servers.get(netloc)
                if k is None:
                    family, _, _, _, addr = socket.getaddrinfo(
                        host, port, type=socket.SOCK_STREAM
                    )[0]
                    k = servers[netloc] = len(server_args)
                    server_args.append((int(family), addr[0], addr[1], netloc, []))
                found = parsed[u] = (k, target.encode("ascii"))
            requests.append((found[0], found[1], s, e))
            which.append(i)
    except OSError as e:  # the name does not resolve: every range fails (transient, as in the Python loop)
        return [b"" if e_ <= s_ else e for s_, e_ in zip(starts, ends)]
    if not requests:
        return out
    for netloc, k in servers.items():
        server_args[k][4].extend(take_idle_fds(netloc))
    fetch = _http_native.Fetch(
        server_args,
        requests,
        concurrency,
        settings.timeout_s,
        settings.max_idle,
        settings.initial_connections,
        settings.grow_after_s,
    )
    netlocs = list(servers)
    try:
        while fetch.left:
            for r, result in fetch.run(_NATIVE_WAIT_S):
                i = which[r]
                if isinstance(result, int):
                    out[i] = _error(result, urls[i], netlocs[requests[r][0]], settings.timeout_s)
                elif on_range is None:
                    out[i] = result
                else:
                    on_range(i, result)
    finally:
        for netloc, fds in zip(netlocs, fetch.idle()):
            give_idle_fds(netloc, fds, settings.max_idle)
        fetch.close()
    return out
