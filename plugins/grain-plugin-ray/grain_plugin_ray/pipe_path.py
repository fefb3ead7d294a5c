"""The one-host data path without actor calls: actors on the consumer's node run ``mp_prefetch``'s
pipe transport.

Through actor calls, each group of elements costs a ``fetch`` (about a millisecond of CPU over the
consumer, the actor and the raylet), and an actor waiting for a credit waits for the next call to
carry it. An actor on the consumer's own Ray node (same node id, Linux) with
``RayRuntime(pipes=True)`` (the default; ``max_restarts=0``) instead talks to the consumer exactly
as a worker process of ``mp_prefetch`` does, over the kernel's public pipe transport
(``grain_core.author``'s ``PipeEndpoint`` in the actor, ``PipePool`` in the consumer): a message
pipe and a credit channel, elements in pooled shared memory, credits written by the consumer's
``next()`` the moment it hands elements out, one I/O thread in the consumer for every actor. Ray
still places, starts, monitors and kills the actors; only the elements and commands bypass it.

The connection: the actor listens on a Linux abstract Unix socket (no file to leave behind) named
after a random token the consumer gave it (:class:`PipeServer`), and says so in its ``location()``.
The consumer, once it has that location, makes both connections itself as socket pairs, attaches
its ends to its ``PipePool`` (:func:`local_pipes`), and hands the actor's ends over in one message
on the actor's socket with the token (:func:`hand_over`, ``SCM_RIGHTS``: the actor gets both
descriptors or neither). The actor takes the first hand-over with the right token, stops listening
and runs its ``WorkerLoop`` over them until the consumer stops it or goes away; a connection that
does not open with the token is closed. So a consumer interrupted anywhere in between (``Ctrl-C``
inside ``next()``) just hands over again: before the actor took the ends, the new hand-over is
taken; after, the actor no longer listens, and the consumer keeps the ends it attached (were the
actor gone instead, closing its copies of the actor's ends makes the pipe end, which reports the
actor lost). The actor waits at most :data:`ACCEPT_SECONDS` for the hand-over.

What stays as with worker processes: order, states and flow control are the kernel's; the actor's
segments carry the consumer's per-actor prefix (swept once the actor is gone, as on the
actor-call path); the consumer detects an actor's death by its pipe's end of file and reports it
with Ray's reason (:class:`ActorPipeWorker`).
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from grain_core.author import CreditSender, PipeEndpoint, WorkerLoop

__all__ = [
    "ACCEPT_SECONDS",
    "NOT_CONNECTED",
    "ActorPipeWorker",
    "PipeServer",
    "available",
    "hand_over",
    "local_pipes",
    "new_token",
]

#: How long an actor waits for the consumer's hand-over after it started listening.
ACCEPT_SECONDS = 600.0
_TOKEN_BYTES = 16
_HAND_OVER = b"P"
_HELLO_SECONDS = 5.0


def available() -> bool:
    """Whether this platform has the pipe path (Linux: abstract Unix sockets)."""
    return sys.platform.startswith("linux")


def new_token() -> str:
    """A random token naming one actor's socket and opening its connections."""
    return secrets.token_hex(_TOKEN_BYTES)


def _address(token: str) -> str:
    return f"\0grain_core-ray-{token}"


class _NotConnected:
    """The endpoint of a loop built before the consumer connected (never called before)."""

    def send(self, message: Any) -> None:
        raise EOFError("the consumer has not connected")

    def receive(self, timeout: float | None) -> Any:
        raise EOFError("the consumer has not connected")


NOT_CONNECTED = _NotConnected()


class PipeServer:
    """The actor's side: listens for the consumer's two connections, then runs ``loop`` over them
    in a thread of its own (``prefix``: the segment names' prefix the consumer gave this actor;
    ``consumer_pid``: the consumer's process, whose end ends the loop)."""

    def __init__(self, token: str, loop: WorkerLoop, prefix: str, consumer_pid: int):
        self.token = token
        self.address = _address(token)
        self._loop = loop
        self._prefix = prefix
        self._consumer_pid = consumer_pid
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(self.address)
            self._listener.listen(4)
        except BaseException:
            self._listener.close()
            raise
        self._thread = threading.Thread(
            target=self._serve, name=f"grain_core-ray-pipes-{loop.index}", daemon=True
        )
        self._thread.start()

    def _accept(self) -> tuple[socket.socket, socket.socket] | None:
        """The actor's ends of the message pipe and the credit channel, or None when no valid
        hand-over came in time."""
        deadline = time.monotonic() + ACCEPT_SECONDS
        want = self.token.encode("ascii") + _HAND_OVER
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._listener.settimeout(min(left, 1.0))
                try:
                    sock, _ = self._listener.accept()
                except TimeoutError:
                    continue
                fds: list[int] = []
                try:
                    sock.settimeout(_HELLO_SECONDS)
                    msg, fds, _, _ = socket.recv_fds(sock, len(want), 2)
                except OSError:
                    msg = b""
                finally:
                    sock.close()
                if msg == want and len(fds) == 2:
                    return socket.socket(fileno=fds[0]), socket.socket(fileno=fds[1])
                for fd in fds:
                    os.close(fd)
        finally:
            self._listener.close()

    def _serve(self) -> None:
        socks = self._accept()
        if socks is None:
            return
        messages, credits = socks
        conn = Connection(messages.detach())
        try:
            endpoint = PipeEndpoint(
                conn, credits, prefix=self._prefix, consumer_pid=self._consumer_pid
            )
        except BaseException:
            conn.close()
            credits.close()
            raise
        try:
            self._loop.endpoint = endpoint
            self._loop.run()
        except (EOFError, OSError):
            pass  # the consumer went away
        finally:
            endpoint.close()  # the segments and both channels


def local_pipes() -> tuple[list[socket.socket], Connection, CreditSender]:
    """A message pipe and a credit channel as socket pairs: the actor's ends (to
    :func:`hand_over`, then close), and the consumer's ends (a ``Connection`` and a
    ``CreditSender``, for ``PipePool.attach``)."""
    messages, messages_actor = socket.socketpair()
    credits, credits_actor = socket.socketpair()
    credits.setblocking(False)
    return [messages_actor, credits_actor], Connection(messages.detach()), CreditSender(credits)


def hand_over(address: str, token: str, ends: list[socket.socket]) -> None:
    """Sends the actor's ``ends`` (from :func:`local_pipes`) to its :class:`PipeServer` at
    ``address``, in one message opened by ``token``. Raises ``OSError`` when the actor does not
    listen (gone, or it took an earlier hand-over)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(_HELLO_SECONDS)
        s.connect(address)
        socket.send_fds(s, [token.encode("ascii") + _HAND_OVER], [e.fileno() for e in ends])
    finally:
        s.close()


class ActorPipeWorker:
    """An actor as the consumer's ``PipePool`` sees it: no sentinel (its pipe's end of file says
    it is gone), its loss described with Ray's reason (``describe()``), and nothing to stop (the
    Ray pool kills its actors)."""

    sentinel = None

    def __init__(self, describe: Callable[[], str]):
        self._describe = describe

    def loss(self) -> str:
        return self._describe()

    def stop(self, deadline: float) -> None:
        pass
