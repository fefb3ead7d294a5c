"""Byte ranges of plain ``http://`` URLs over keep-alive sockets from one thread (no aiohttp).

fsspec's HTTP filesystem runs every range request through aiohttp on its event loop thread, about
0.2 ms of client CPU per request; a shuffled read of small records makes one request per few
records, so that cost bounds the rate. :func:`read_ranges` sends the same ``GET`` with a ``Range``
header over non-blocking sockets watched by one loop in the calling thread, keeps the connections
open between calls (a bounded per-process pool), and parses only what a range answer needs
(status, ``Content-Length``, ``Content-Range``, ``Connection``). The loop runs in C where the
plugin's ``_http_native`` accelerator is built (:data:`NATIVE`; Linux, ``epoll``, the GIL released
while it runs: :mod:`._http_native_loop`), else in Python (``select.epoll`` where there is one,
else ``selectors``: :mod:`._http_loop`); both follow every rule below and share
:mod:`._http_shared` (errors, settings, the idle connection pools). A call opens at most
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
(``_http_loop._HEAD_ROOM``), so the body lands in place from the socket and is handed on as that buffer
without the head (no copy: a ``bytearray`` with its front dropped in Python, a ``memoryview`` of
the C loop's buffer); only a head longer than the room costs one copy of the body bytes that came
with it.

Memory: each range's body is at most its requested length (a longer answer is refused), answer
heads at most 64 KiB, at most ``concurrency`` connections open per call and
:data:`MAX_IDLE` kept idle per server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from grain_core.author import RetryPolicy, retry_ranges
from grain_core.author import read_ranges as fsspec_read_ranges
from grain_plugin_arrayrecord import _http_loop, _http_native_loop
from grain_plugin_arrayrecord._http_shared import (
    Fallback,
    HTTPStatusError,
    LoopSettings,
    close_idle,
)

#: The C loop's module where the accelerator is built, else None (the Python loop is used).
_native: Any = _http_native_loop if _http_native_loop.AVAILABLE else None

__all__ = [
    "ENABLED",
    "GROW_AFTER_S",
    "INITIAL_CONNECTIONS",
    "MAX_IDLE",
    "NATIVE",
    "TIMEOUT_S",
    "HTTPStatusError",
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
    settings = LoopSettings(TIMEOUT_S, MAX_IDLE, INITIAL_CONNECTIONS, GROW_AFTER_S)
    fallback: list[int] = []

    def one_try(todo: list[int]) -> list[Any]:
        def arrived(k: int, data: Any) -> None:
            assert on_range is not None
            on_range(todo[k], data)

        got = (_http_loop.fetch if _native is None else _native.fetch)(
            [paths[i] for i in todo],
            [starts[i] for i in todo],
            [ends[i] for i in todo],
            concurrency,
            settings,
            None if on_range is None else arrived,
        )
        for i, r in zip(todo, got):
            if isinstance(r, Fallback):
                fallback.append(i)
        return [None if isinstance(r, Fallback) else r for r in got]

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
