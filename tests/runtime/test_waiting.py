"""grain_core/runtime/waiting.py: the process runtime's one way to wait on pipes, sockets and process
sentinels (issue 27: portable, every wait bounded). Both of the Poller's paths are run here: the
``poll`` one (POSIX) and the ``multiprocessing.connection.wait`` one the platforms without ``poll``
(Windows) take."""

from __future__ import annotations

import ast
import multiprocessing as mp
import pathlib
import socket

import pytest

from grain_core.runtime import waiting

RUNTIME = pathlib.Path(__file__).parents[2] / "grain_core" / "runtime"


def _pollers():
    with_poll = waiting.Poller()
    without_poll = waiting.Poller()
    without_poll._poll = None  # the path of a platform without select.poll
    return [with_poll, without_poll]


@pytest.mark.parametrize("path", ["poll", "connection.wait"])
def test_poller_reports_what_is_readable(path):
    poller = _pollers()[path == "connection.wait"]
    a, b = mp.Pipe()
    r, w = socket.socketpair()
    try:
        ka, kr = poller.register(a), poller.register(r)
        assert poller.wait(0) == []
        b.send("x")
        assert poller.wait(1.0) == [ka]
        w.send(b"\0")
        assert sorted(poller.wait(1.0)) == sorted([ka, kr])
        assert a.recv() == "x" and r.recv(16) == b"\0"
        assert poller.wait(0.01) == []
        poller.unregister(ka)
        b.send("y")
        assert poller.wait(0.01) == []  # no longer watched
        poller.unregister(ka)  # twice is harmless
    finally:
        for c in (a, b, r, w):
            c.close()


@pytest.mark.parametrize("path", ["poll", "connection.wait"])
def test_poller_sees_a_process_end(path):
    poller = _pollers()[path == "connection.wait"]
    proc = mp.get_context("spawn").Process(target=int)  # exits at once
    proc.start()
    try:
        key = poller.register(proc.sentinel)
        got = []
        for _ in range(600):  # bounded: at most 60 s for an interpreter to start and exit
            got = poller.wait(0.1)
            if got:
                break
        assert got == [key]
    finally:
        proc.join(60)
        proc.close()


def test_wait_readable_is_always_bounded():
    a, b = mp.Pipe()
    try:
        assert waiting.wait_readable([a], 0) == []
        b.send(1)
        assert waiting.wait_readable([a, b], 1.0) == [a]
        with pytest.raises(ValueError, match="timeout"):
            waiting.wait_readable([a], None)  # type: ignore[arg-type]
    finally:
        a.close()
        b.close()


def test_the_runtime_waits_only_through_waiting():
    """No runtime module calls ``select`` itself (``select.poll`` is missing on Windows and
    ``select.select`` takes no pipe there): waits go through grain_core.runtime.waiting."""
    offenders = []
    for path in sorted(RUNTIME.glob("*.py")):
        if path.name == "waiting.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import) and any(a.name == "select" for a in node.names):
                offenders.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "select":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
