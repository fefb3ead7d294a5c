"""grain_core.filesystems (one way to name a filesystem, bounded retried range reads) and
grain_core.testing.servers' HTTP range server, against real fsspec filesystems and a real server."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import fsspec
import pytest

from grain_core import filesystems
from grain_core.filesystems import RetryPolicy
from grain_core.testing.servers import RangeHTTPServer

pytestmark = pytest.mark.timeout(120)

DATA = bytes(range(256)) * 40


def _get(url: str, range_header: str | None = None) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url, headers={"Range": range_header} if range_header else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_range_server_answers_ranges_counts_requests_and_injects_failures(tmp_path):
    (tmp_path / "a.bin").write_bytes(DATA)
    with RangeHTTPServer(tmp_path) as server:
        assert _get(f"{server.url}/a.bin")[:2] == (200, DATA)
        status, body, headers = _get(f"{server.url}/a.bin", "bytes=10-19")
        assert (status, body) == (206, DATA[10:20])
        assert headers["Content-Range"] == f"bytes 10-19/{len(DATA)}"
        assert _get(f"{server.url}/a.bin", "bytes=-5")[1] == DATA[-5:]
        assert _get(f"{server.url}/a.bin", "bytes=10000-")[1] == DATA[10000:]
        assert _get(f"{server.url}/a.bin", "bytes=999999-")[0] == 416
        assert _get(f"{server.url}/missing")[0] == 404
        assert _get(f"{server.url}/../etc/passwd")[0] == 404
        server.fail_next(2)
        assert [_get(f"{server.url}/a.bin")[0] for _ in range(3)] == [503, 503, 200]
        assert server.requests == 10
    with RangeHTTPServer({"x": b"hello"}) as server:
        assert _get(f"{server.url}/x", "bytes=1-3")[1] == b"ell"
        server.put("y", b"more")
        assert _get(f"{server.url}/y")[1] == b"more"


def test_range_server_leaves_no_thread_behind(tmp_path):
    (tmp_path / "a.bin").write_bytes(DATA)
    with RangeHTTPServer(tmp_path) as server:
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        # a keep-alive connection stays open in the client: stop() must still end its thread
        assert fs.cat_file(f"{server.url}/a.bin", start=3, end=9) == DATA[3:9]
        assert any("process_request" in t.name for t in threading.enumerate())
    alive = [t.name for t in threading.enumerate()]
    assert not [n for n in alive if "process_request" in n or "serve_forever" in n]


def test_resolve_filesystem_one_way_for_every_source():
    mem = fsspec.filesystem("memory")
    fs, path = filesystems.resolve_filesystem("memory://bucket/x.bin")
    assert filesystems.storage_token(fs) == "memory" and path == "/bucket/x.bin"
    fs, path = filesystems.resolve_filesystem("bucket/x.bin", filesystem=mem)
    assert fs is mem and path == "/bucket/x.bin"
    fs, _ = filesystems.resolve_filesystem("/tmp/x.bin")
    assert "file" in fs.protocol
    fs, _ = filesystems.resolve_filesystem(
        "http://127.0.0.1:9/x", storage_options={"block_size": 0}
    )
    assert "http" in fs.protocol
    with pytest.raises(ValueError, match="not both"):
        filesystems.resolve_filesystem("s3://b/x", filesystem=mem, storage_options={})
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        filesystems.resolve_filesystem("s3://b/x", storage_options=[("a", 1)])
    with pytest.raises(TypeError, match="fsspec filesystem"):
        filesystems.resolve_filesystem("b/x", filesystem="s3")
    with pytest.raises(ValueError, match="no filesystem for 'nosuchproto://x'"):
        filesystems.resolve_filesystem("nosuchproto://x")
    assert filesystems.is_local("/a/b") and filesystems.is_local("file:///a")
    assert not filesystems.is_local("gs://a/b") and not filesystems.is_local("/a", mem)


def test_read_ranges_are_concurrent_retried_and_bounded(tmp_path):
    (tmp_path / "a.bin").write_bytes(DATA)
    with RangeHTTPServer(tmp_path) as server:
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        url = f"{server.url}/a.bin"
        starts = list(range(0, 5000, 500))
        assert filesystems.read_ranges(fs, url, starts, [s + 7 for s in starts]) == [
            DATA[s : s + 7] for s in starts
        ]
        server.fail_next(3)  # some ranges fail, then the retries read them
        got = filesystems.read_ranges(fs, url, starts, [s + 7 for s in starts])
        assert got == [DATA[s : s + 7] for s in starts]
        server.fail_next(10**6)
        before = server.requests
        policy = RetryPolicy(attempts=3, initial_delay_s=0.001, max_delay_s=0.002)
        with pytest.raises(OSError, match=r"a\.bin.*failed after 3 tries"):
            filesystems.read_ranges(fs, url, [0, 10], [5, 15], retry=policy)
        assert server.requests - before == 6  # two ranges, three tries each: no more
        server.fail_next(0)
        with pytest.raises(FileNotFoundError):
            filesystems.read_ranges(fs, f"{server.url}/missing", [0], [5], retry=policy)
    mem = fsspec.filesystem("memory")
    mem.pipe("/ranges/a.bin", DATA)
    try:
        assert filesystems.read_ranges(mem, "/ranges/a.bin", [1, 3], [2, 6]) == [
            DATA[1:2],
            DATA[3:6],
        ]
        assert filesystems.file_size(mem, "/ranges/a.bin") == len(DATA)
    finally:
        mem.rm("/ranges/a.bin")


def test_transient_errors_and_retry_policy():
    class Status(Exception):
        def __init__(self, status):
            self.status = status

    assert filesystems.is_transient(ConnectionResetError())
    assert filesystems.is_transient(TimeoutError())
    assert filesystems.is_transient(Status(503)) and filesystems.is_transient(Status(429))
    assert not filesystems.is_transient(Status(404)) and not filesystems.is_transient(Status(403))
    assert not filesystems.is_transient(PermissionError())
    missing = FileNotFoundError("x")
    assert not filesystems.is_transient(missing)
    try:
        raise FileNotFoundError("x") from Status(503)  # fsspec's HTTP size query on a 503
    except FileNotFoundError as e:
        assert filesystems.is_transient(e)
    assert not filesystems.is_transient(ValueError())
    policy = RetryPolicy(attempts=4, initial_delay_s=0.1, max_delay_s=0.3)
    for k, base in enumerate((0.1, 0.2, 0.3, 0.3)):  # doubling, capped, up to 25% jitter
        assert base <= policy.delay(k) <= base * 1.25
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="initial_delay_s <= max_delay_s"):
        RetryPolicy(initial_delay_s=3, max_delay_s=1)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("reset")
        return "ok"

    assert filesystems.with_retries(flaky, "x", RetryPolicy(initial_delay_s=0.001)) == "ok"
    assert len(calls) == 3

    def down():
        calls.append(1)
        raise ConnectionResetError("reset")

    calls.clear()
    with pytest.raises(OSError, match="reading z failed after 2 tries"):
        filesystems.with_retries(down, "reading z", RetryPolicy(attempts=2, initial_delay_s=0.001))
    assert len(calls) == 2
    with pytest.raises(KeyError):  # not transient: at once, unchanged
        filesystems.with_retries(lambda: {}["k"], "x")
