"""``grain_core.testing.servers_asyncio.AsyncRangeServer``: the benchmarks' lean range server answers
like ``RangeHTTPServer`` (fsspec's HTTP filesystem reads every byte range right), keeps answers in
request order on a connection, and leaves no thread or connection behind."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import fsspec
import numpy as np
import pytest

from grain_core.testing.servers import RangeHTTPServer
from grain_core.testing.servers_asyncio import AsyncRangeServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def directory(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "a.bin").write_bytes(rng.bytes(100_000))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"hello")
    return tmp_path


def _raw(port: int, data: bytes) -> bytes:
    """Sends ``data`` on one connection and reads until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


@pytest.mark.parametrize("latency", [0.0, 0.01])
def test_fsspec_reads_the_same_bytes_as_from_the_thread_server(directory, latency):
    data = (directory / "a.bin").read_bytes()
    rng = np.random.default_rng(1)
    starts = rng.integers(0, len(data), 50).tolist()
    ends = [min(len(data), s + int(n)) for s, n in zip(starts, rng.integers(1, 5000, 50))]
    with AsyncRangeServer(directory, latency_s=latency) as fast, RangeHTTPServer(directory) as slow:
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        for server in (fast, slow):
            url = f"{server.url}/a.bin"
            assert fs.size(url) == len(data)
            got = fs.cat_ranges([url] * 50, starts, ends, batch_size=16)
            assert got == [data[s:e] for s, e in zip(starts, ends)]
            assert fs.cat_file(f"{server.url}/sub/b.bin") == b"hello"
            with pytest.raises(FileNotFoundError):
                fs.cat_file(f"{server.url}/missing.bin")
        assert fast.requests >= 52  # the size, 50 ranges, the two whole files


def test_ranges_errors_and_pipelined_order(directory):
    data = (directory / "a.bin").read_bytes()
    with AsyncRangeServer(directory, latency_s=0.005) as server:
        # three pipelined requests on one connection: answered in order, the last closes it
        out = _raw(
            server.port,
            b"GET /a.bin HTTP/1.1\r\nRange: bytes=10-19\r\n\r\n"
            b"HEAD /a.bin HTTP/1.1\r\n\r\n"
            b"GET /a.bin HTTP/1.1\r\nrange: bytes=-5\r\nConnection: close\r\n\r\n",
        )
        first, rest = out.split(b"\r\n\r\n", 1)
        assert first.startswith(b"HTTP/1.1 206") and b"Content-Range: bytes 10-19/100000" in first
        assert rest.startswith(data[10:20] + b"HTTP/1.1 200")
        assert b"Content-Length: 100000" in rest
        assert out.endswith(data[-5:]) and b"Content-Range: bytes 99995-99999/100000" in out
        assert b"416" in _raw(server.port, b"GET /a.bin HTTP/1.1\r\nRange: bytes=100000-\r\nConnection: close\r\n\r\n")
        assert b"404" in _raw(server.port, b"GET /../etc/passwd HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert b"501" in _raw(server.port, b"PUT /a.bin HTTP/1.1\r\n\r\n")
        assert b"400" in _raw(server.port, b"nonsense\r\n\r\n")
        assert server.requests == 6  # a malformed request is not counted


def test_stop_leaves_nothing_behind(directory):
    before = threading.active_count()
    server = AsyncRangeServer(directory).start()
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)  # left open
    conn.sendall(b"GET /sub/b.bin HTTP/1.1\r\n\r\n")
    assert conn.recv(65536).endswith(b"hello")  # accepted and answered (keep-alive)
    server.stop()
    server.stop()  # idempotent
    assert threading.active_count() == before
    assert conn.recv(10) == b""  # the server closed it
    conn.close()
    with pytest.raises(RuntimeError):
        _ = server.port


def test_bad_arguments(directory):
    with pytest.raises(NotADirectoryError):
        AsyncRangeServer(directory / "a.bin")
    with pytest.raises(ValueError):
        AsyncRangeServer(directory, latency_s=-1)


def test_runs_as_a_module_until_stdin_closes(directory):
    proc = subprocess.Popen(
        [sys.executable, "-m", "grain_core.testing.servers_asyncio", str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        word, port = proc.stdout.readline().split()
        assert word == "port"
        assert _raw(int(port), b"GET /sub/b.bin HTTP/1.1\r\nConnection: close\r\n\r\n").endswith(b"hello")
        out, _ = proc.communicate(input="", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert out.split() == ["bytes", "5", "requests", "1"]  # body bytes of its answers, requests


def test_bodies_larger_than_the_socket_buffer_stay_whole_and_in_order(tmp_path):
    # Pipelined answers far larger than a socket's buffer, read only after all were asked: the
    # first goes out by sendfile until the socket is full and the rest through the transport;
    # the later ones queue behind it. Every byte arrives, in the requests' order.
    data = np.random.default_rng(2).bytes(24 << 20)
    (tmp_path / "big.bin").write_bytes(data)
    spans = [(0, 9 << 20), (3, 16 << 20), (20 << 20, (24 << 20) - 1), (7, 7)]
    ask = b"".join(b"GET /big.bin HTTP/1.1\r\nRange: bytes=%d-%d\r\n\r\n" % s for s in spans)
    with AsyncRangeServer(tmp_path) as server:
        out = _raw(server.port, ask + b"GET /missing HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert server.bytes_sent == sum(b - a + 1 for a, b in spans)
    for a, b in spans:
        head, out = out.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 206")
        assert b"Content-Length: %d\r\n" % (b - a + 1) in head + b"\r\n"
        assert out[: b - a + 1] == data[a : b + 1]
        out = out[b - a + 1 :]
    assert out.startswith(b"HTTP/1.1 404")
