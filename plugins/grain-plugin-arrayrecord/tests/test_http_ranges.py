"""The lean ``http://`` range client (``http_ranges``) against real servers on loopback: it returns
what fsspec returns, keeps fsspec's errors and the retry policy's bounded tries, replaces
connections the server shut, reads answers it does not take through fsspec, and gives up on a
silent server after a bounded wait. Every test runs with the request loop in C (``_http_native``,
where it is built: ``test_riegeli_native.py::test_built_where_it_can_be`` fails where it could be
and is not) and in Python."""

from __future__ import annotations

import contextlib
import http.server
import multiprocessing
import os
import re
import select
import socket
import threading

import fsspec
import numpy as np
import pytest
from grain_plugin_arrayrecord import _http_shared, http_ranges

from grain_core.filesystems import RetryPolicy
from grain_core.testing.servers import RangeHTTPServer
from grain_core.testing.servers_asyncio import AsyncRangeServer

pytestmark = pytest.mark.timeout(120)

FILES = {
    "a.bin": np.random.default_rng(0).bytes(300_000),
    "b.bin": np.random.default_rng(1).bytes(5_000),
}
QUICK = RetryPolicy(attempts=3, initial_delay_s=0.01)


@pytest.fixture(autouse=True, params=["C", "python"])
def loop(request, monkeypatch):
    """Which request loop ``read_ranges`` runs."""
    if request.param == "C":
        if http_ranges._native is None:
            pytest.skip("the C request loop is not built here")
    else:
        monkeypatch.setattr(http_ranges, "_native", None)
    return request.param


@pytest.fixture
def http_fs():
    http_ranges.close_idle()
    yield fsspec.filesystem("http", skip_instance_cache=True)
    http_ranges.close_idle()


def _asks(url: str):
    rng = np.random.default_rng(2)
    paths, starts, ends = [], [], []
    for _ in range(200):
        name = "a.bin" if rng.random() < 0.8 else "b.bin"
        size = len(FILES[name])
        s = int(rng.integers(0, size))
        paths.append(f"{url}/{name}")
        starts.append(s)
        ends.append(s + int(rng.integers(0, 40_000)))  # some run past the end: a short answer
    return paths, starts, ends


@pytest.mark.parametrize("poller", ["epoll", "selectors"])
@pytest.mark.parametrize("server", [RangeHTTPServer, AsyncRangeServer])
@pytest.mark.parametrize("concurrency", [1, 3, 64])
def test_ranges_are_fsspecs(tmp_path, http_fs, server, concurrency, poller, loop, monkeypatch):
    if loop == "C" and poller == "selectors":
        pytest.skip("the C loop is Linux-only and uses epoll")
    if poller == "selectors":  # where select has no epoll (macOS, Windows): selectors' default
        monkeypatch.delattr(select, "epoll", raising=False)
    elif not hasattr(select, "epoll"):
        pytest.skip("no epoll here")
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    with server(str(tmp_path)) as srv:
        paths, starts, ends = _asks(srv.url)
        assert all(http_ranges.usable(http_fs, p) for p in paths)
        expected = [FILES[p.rsplit("/", 1)[1]][s:e] for p, s, e in zip(paths, starts, ends)]
        assert http_fs.cat_ranges(paths, starts, ends) == expected
        before = srv.requests
        for _ in range(2):  # the second time on the connections kept from the first
            got = http_ranges.read_ranges(
                http_fs, paths, starts, ends, retry=QUICK, concurrency=concurrency
            )
            assert got == expected
        empty = sum(e <= s for s, e in zip(starts, ends))
        assert srv.requests - before == 2 * (len(paths) - empty)  # one request per range


def test_only_default_http_filesystems_and_plain_http_urls(http_fs, monkeypatch):
    url = "http://127.0.0.1:1/x.array_record"
    assert http_ranges.usable(http_fs, url)
    assert not http_ranges.usable(http_fs, "https://example.com/x")
    assert not http_ranges.usable(http_fs, "http://127.0.0.1:1/a b")  # fsspec quotes it
    assert not http_ranges.usable(http_fs, "http://me:pw@127.0.0.1:1/x")  # aiohttp's auth
    with_headers = fsspec.filesystem(
        "http", skip_instance_cache=True, headers={"Authorization": "Bearer x"}
    )
    assert not http_ranges.usable(with_headers, url)  # options this client would not send
    with_client = fsspec.filesystem(
        "http", skip_instance_cache=True, client_kwargs={"trust_env": True}
    )
    assert not http_ranges.usable(with_client, url)
    assert not http_ranges.usable(fsspec.filesystem("memory"), url)
    monkeypatch.setattr(http_ranges, "ENABLED", False)
    assert not http_ranges.usable(http_fs, url)


def test_missing_files_and_failures_keep_fsspecs_errors_and_bounded_tries(tmp_path, http_fs):
    (tmp_path / "a.bin").write_bytes(FILES["a.bin"])
    with RangeHTTPServer(str(tmp_path)) as srv:
        with pytest.raises(FileNotFoundError, match="nope.bin"):
            http_ranges.read_ranges(
                http_fs, [f"{srv.url}/nope.bin"], [0], [10], retry=QUICK, concurrency=4
            )
        srv.fail_next(2)  # two 503s, then answers: retried within the policy
        got = http_ranges.read_ranges(
            http_fs, [f"{srv.url}/a.bin"] * 2, [0, 10], [5, 20], retry=QUICK, concurrency=4
        )
        assert got == [FILES["a.bin"][:5], FILES["a.bin"][10:20]]
        srv.fail_next(10**6)
        before = srv.requests
        with pytest.raises(OSError, match=r"bytes \[0, 5\) of .*a.bin.* failed after 3 tries"):
            http_ranges.read_ranges(
                http_fs, [f"{srv.url}/a.bin"], [0], [5], retry=QUICK, concurrency=4
            )
        assert srv.requests - before == 3  # exactly the policy's tries
        srv.fail_next(0)


class _OneShotServer:
    """Answers one range request per connection, then closes it without saying so (as a server
    with a per-connection request limit does): a kept connection is found shut on reuse.
    ``padding`` header bytes are added to each answer's head, sent ``piece`` bytes at a time
    (and the first bytes of the body), then the rest."""

    def __init__(self, data: bytes, padding: int = 0, piece: int = 0):
        self.data, self.requests = data, 0
        self.padding, self.piece = padding, piece
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                head = b""
                with contextlib.suppress(OSError):
                    while b"\r\n\r\n" not in head:
                        more = conn.recv(4096)
                        if not more:
                            break
                        head += more
                found = re.search(rb"Range: bytes=(\d+)-(\d+)", head)
                if not found:
                    continue
                self.requests += 1
                a, b = int(found[1]), min(int(found[2]), len(self.data) - 1)
                body = self.data[a : b + 1]
                pad = b"X-Pad: %s\r\n" % (b"p" * self.padding) if self.padding else b""
                answer = (
                    b"HTTP/1.1 206 Partial Content\r\nContent-Length: %d\r\n%s"
                    b"Content-Range: bytes %d-%d/%d\r\n\r\n%s"
                    % (len(body), pad, a, b, len(self.data), body)
                )
                split = answer.index(b"\r\n\r\n") + 20 if self.piece else 0  # the head in pieces
                with contextlib.suppress(OSError):  # the client may give up on a long head
                    for k in range(0, split, self.piece or 1):
                        conn.sendall(answer[k : min(k + self.piece, split)])
                    conn.sendall(answer[split:])

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accept() (closing alone does not on Linux)
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def test_connections_the_server_shut_are_replaced_without_a_failure(http_fs):
    server = _OneShotServer(FILES["a.bin"])
    try:
        url = f"{server.url}/a.bin"
        one = RetryPolicy(attempts=1)  # a stale connection must not cost a try
        for k in range(3):
            got = http_ranges.read_ranges(
                http_fs, [url] * 4, [0, 7, 100, k], [5, 50, 200, k + 9], retry=one, concurrency=2
            )
            assert got == [
                FILES["a.bin"][s:e] for s, e in ((0, 5), (7, 50), (100, 200), (k, k + 9))
            ]
        assert server.requests == 12
    finally:
        server.close()


@pytest.mark.parametrize("padding", [0, 100, 5_000, 40_000])
@pytest.mark.parametrize("piece", [0, 3, 1_000])
def test_heads_of_any_length_in_any_pieces_give_the_bodies(http_fs, padding, piece, loop):
    """Head and body are received into one buffer with room for a head in front: a longer head
    (the body then gets its own buffer) and answers that arrive a few bytes at a time give the
    same bytes."""
    server = _OneShotServer(FILES["a.bin"], padding=padding, piece=piece)
    try:
        url = f"{server.url}/a.bin"
        asks = ([url] * 4, [0, 7, 1000, 299_990], [5, 9_000, 61_000, 300_000])
        got = http_ranges.read_ranges(http_fs, *asks, retry=QUICK, concurrency=2)
        assert [bytes(g) for g in got] == [FILES["a.bin"][s:e] for s, e in zip(*asks[1:])]
        # the buffer the body was received into, not a copy of it
        assert all(isinstance(g, memoryview if loop == "C" else bytearray) for g in got)
    finally:
        server.close()


def test_a_head_over_64_kib_is_refused(http_fs):
    server = _OneShotServer(FILES["a.bin"], padding=70_000)
    try:
        with pytest.raises(OSError, match="failed after 3 tries.*head over 64 KiB"):
            http_ranges.read_ranges(
                http_fs, [f"{server.url}/a.bin"], [0], [10], retry=QUICK, concurrency=2
            )
    finally:
        server.close()


class _NoRangeHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_answers_it_does_not_take_are_read_through_fsspec(tmp_path, http_fs):
    """Python's ``http.server`` ignores ``Range`` (200 and the whole file): fsspec's reading of
    those answers is used, so the result is fsspec's."""
    (tmp_path / "a.bin").write_bytes(FILES["a.bin"])

    def handler(*args, **kwargs):
        return _NoRangeHandler(*args, directory=str(tmp_path), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/a.bin"
        asks = ([url] * 2, [0, 1000], [10, 2000])
        got = http_ranges.read_ranges(http_fs, *asks, retry=QUICK, concurrency=4)
        assert got == http_fs.cat_ranges(*asks)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_silent_server_fails_after_a_bounded_wait(http_fs, monkeypatch):
    monkeypatch.setattr(http_ranges, "TIMEOUT_S", 0.2)
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog) and never answers
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/x"
        with pytest.raises(OSError, match="failed after 2 tries.*TimeoutError"):
            http_ranges.read_ranges(
                http_fs,
                [url],
                [0],
                [10],
                retry=RetryPolicy(attempts=2, initial_delay_s=0.01),
                concurrency=4,
            )
    finally:
        silent.close()


def test_on_range_gets_each_range_once_and_its_errors_end_the_call(tmp_path, http_fs):
    (tmp_path / "a.bin").write_bytes(FILES["a.bin"])
    with AsyncRangeServer(str(tmp_path)) as srv:
        url = f"{srv.url}/a.bin"
        starts = list(range(0, 200_000, 10_000))
        ends = [s + 3_000 for s in starts]
        seen: dict[int, bytes] = {}

        def keep(i: int, data) -> None:
            assert i not in seen
            seen[i] = bytes(data)

        out = http_ranges.read_ranges(
            http_fs, [url] * len(starts), starts, ends, retry=QUICK, concurrency=3, on_range=keep
        )
        assert out == [None] * len(starts)
        assert seen == {i: FILES["a.bin"][s:e] for i, (s, e) in enumerate(zip(starts, ends))}

        def fail(i: int, data) -> None:
            if i == 5:  # an OSError of the caller's is the caller's, not a failed connection
                raise IsADirectoryError("the caller's error")

        with pytest.raises(IsADirectoryError, match="the caller's error"):
            http_ranges.read_ranges(
                http_fs,
                [url] * len(starts),
                starts,
                ends,
                retry=QUICK,
                concurrency=3,
                on_range=fail,
            )
        again = http_ranges.read_ranges(http_fs, [url], [7], [70], retry=QUICK, concurrency=3)
        assert again == [FILES["a.bin"][7:70]]


def _take_idle_in_child() -> None:
    assert _http_shared.take_idle("127.0.0.1:1") is None
    assert _http_shared._IDLE_FDS == {}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork start method only")
def test_a_forked_child_has_its_own_lock_and_no_kept_connections():
    """The parent's pool lock, held by another thread at the fork, must not block the child."""
    ctx = multiprocessing.get_context("fork")
    with _http_shared._LOCK:  # as another thread of the parent might hold it
        child = ctx.Process(target=_take_idle_in_child)
        child.start()
        child.join(60)
        if child.is_alive():
            child.kill()
            child.join(10)
    assert child.exitcode == 0


def _client_sockets(port: int) -> list[int]:
    """This process's descriptors of sockets connected to ``port`` on loopback (the clients'
    ends; the server's ends of the same connections have ``port`` as their own)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            dup = os.dup(int(name))
        except OSError:  # listdir's own descriptor, closed by now
            continue
        try:
            sock = socket.socket(fileno=dup)
        except OSError:  # not a socket
            os.close(dup)
            continue
        with sock:
            try:
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    if sock.getpeername()[1] == port:
                        found.append(int(name))
            except OSError:  # not connected
                continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists /proc/self/fd")
def test_no_socket_is_left_open_after_close_idle(tmp_path, http_fs):
    """Ranges that succeed or fail (404, a caller's error in ``on_range``) leave no connection
    open but the kept ones, and ``close_idle`` closes those."""
    (tmp_path / "a.bin").write_bytes(FILES["a.bin"])
    with AsyncRangeServer(str(tmp_path)) as srv:
        url = f"{srv.url}/a.bin"
        starts = list(range(0, 200_000, 10_000))
        ends = [s + 3_000 for s in starts]

        def fail(i: int, data) -> None:
            raise KeyError("the caller's error")

        with pytest.raises(KeyError):  # the connections in use are closed, not kept
            http_ranges.read_ranges(
                http_fs, [url] * 20, starts, ends, retry=QUICK, concurrency=8, on_range=fail
            )
        assert len(_client_sockets(srv.port)) <= 8
        with pytest.raises(FileNotFoundError):
            http_ranges.read_ranges(
                http_fs, [f"{srv.url}/nope"], [0], [10], retry=QUICK, concurrency=8
            )
        for _ in range(2):
            got = http_ranges.read_ranges(
                http_fs, [url] * 20, starts, ends, retry=QUICK, concurrency=8
            )
            assert [bytes(g) for g in got] == [FILES["a.bin"][s:e] for s, e in zip(starts, ends)]
        assert 0 < len(_client_sockets(srv.port)) <= 8  # kept for the next call
        http_ranges.close_idle()
        assert _client_sockets(srv.port) == []


def test_a_call_opens_more_connections_only_once_answers_are_slow(tmp_path, http_fs, monkeypatch):
    """A call starts with at most ``INITIAL_CONNECTIONS`` new connections and opens more (up to
    its concurrency) only after ``GROW_AFTER_S`` without an answer while ranges wait."""
    (tmp_path / "a.bin").write_bytes(FILES["a.bin"])
    starts = list(range(0, 200_000, 5_000))  # 40 ranges
    ends = [s + 1_000 for s in starts]
    want = [FILES["a.bin"][s:e] for s, e in zip(starts, ends)]
    monkeypatch.setattr(http_ranges, "GROW_AFTER_S", 600.0)  # answers are never that slow here
    with AsyncRangeServer(str(tmp_path)) as srv:
        url = f"{srv.url}/a.bin"
        got = http_ranges.read_ranges(
            http_fs, [url] * 40, starts, ends, retry=QUICK, concurrency=64
        )
        assert [bytes(g) for g in got] == want
        assert 0 < len(_client_sockets(srv.port)) <= http_ranges.INITIAL_CONNECTIONS
    http_ranges.close_idle()
    monkeypatch.setattr(http_ranges, "GROW_AFTER_S", 0.001)
    with AsyncRangeServer(str(tmp_path), latency_s=0.5) as srv:
        url = f"{srv.url}/a.bin"
        got = http_ranges.read_ranges(
            http_fs, [url] * 40, starts, ends, retry=QUICK, concurrency=64
        )
        assert [bytes(g) for g in got] == want
        # every answer takes 0.5 s: the call grew past its first connections
        assert len(_client_sockets(srv.port)) > http_ranges.INITIAL_CONNECTIONS
