"""The worker side: a Ray actor running one worker share through the kernel's ``WorkerLoop``.

:class:`WorkerActor` (made a Ray actor by :class:`grain_plugin_ray.pool.RayWorkerPool`) applies the
job's :class:`~grain_core.runtime.api.WorkerEnvironment`, then runs
``WorkerLoop(job, index, endpoint).run()`` in a thread of the actor, exactly as a worker process of
``mp_prefetch`` does, so the actor produces the same elements with the same states. The loop talks
to an :class:`ActorEndpoint`: two queues that the actor's methods fill and drain.

* ``post(seq, message)``: a command from the consumer. Calls of a threaded actor may run out of
  order, so commands carry the consumer's sequence number and the endpoint hands them to the loop
  in that order.
* ``fetch(acked, wait_s, credit, released)``: posts ``credit`` (a ``(seq, Consumed)`` command, or
  None) and the numbers of the shared-memory parts the consumer gave back (``released``, see
  below), then returns every message the loop sent after message ``acked``, waiting up to
  ``wait_s`` seconds for the first; with nothing to return, it returns at once while the loop
  waits for a command with elements sent and not credited (it may wait for a credit, which the
  consumer's next fetch carries). Batches of elements travel as the method's return value, through Ray's
  object store (numpy leaves of large results are zero-copy views for the consumer).
* On the consumer's own Ray node, groups of elements travel through shared memory instead
  (:mod:`grain_plugin_ray.shm_path`): ``send`` writes each group's large buffers into a pooled
  segment and the outbox keeps a small descriptor; a segment is reused once the consumer gave its
  part back (its arrays are gone), or, for a group the consumer never reads, once it acknowledged
  the group.
* ``hurry()``: the consumer waits for this actor's next message; the fetch in flight (or the next
  one) returns as soon as it has one.

Grouping: an actor call costs milliseconds of CPU over the consumer, the actor, the raylet and the
object store whatever it carries, so a ``fetch`` that has messages to return holds them until they
make a group: :data:`GROUP_ELEMENTS` elements or ``group_bytes`` bytes (3/8 of
``RayRuntime.ahead_bytes``: the consumer credits the group before last with each fetch, so the
actor fills the next group within its allowance), and returns earlier when the loop cannot go on (it waits for a
command: its bound is reached, or it ended), when a message other than elements is queued, when
the consumer hurries it, or :data:`HOLD_SECONDS` after it started holding. Which elements travel
together changes nothing else: order, states and acknowledgements are the same.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from grain_core.author import AHEAD_BYTES, Consumed, WorkerJob, WorkerLoop, nbytes
from grain_plugin_ray.pipe_path import NOT_CONNECTED, PipeServer
from grain_plugin_ray.pipe_path import available as pipe_available
from grain_plugin_ray.shm_path import ShmSender, usable

__all__ = ["GROUP_ELEMENTS", "HOLD_SECONDS", "ActorEndpoint", "Location", "WorkerActor"]

#: A ``fetch`` holds its messages until they carry this many elements (or ``group_bytes``).
GROUP_ELEMENTS = 64
#: The longest a ``fetch`` holds messages it could return, waiting for a group.
HOLD_SECONDS = 0.05


def _message_bytes(message: Any) -> tuple[int, int]:
    """(elements, estimated bytes) of a message: an ``Elements``' size from its first and last
    element (a group's elements are alike; the estimate only shapes groups), ``(0, -1)`` for any
    other message (returned at once)."""
    elements = getattr(message, "elements", None)
    if elements is None:
        return 0, -1
    n = len(elements)
    if not n:
        return 0, 0
    return n, n * ((nbytes(elements[0]) + nbytes(elements[-1])) // 2)


class ActorEndpoint:
    """The ``WorkerEndpoint`` a ``WorkerLoop`` talks to inside the actor (thread-safe).

    Both directions survive a consumer interrupted at any point (``Ctrl-C`` in ``next()``):

    * Commands are delivered in the consumer's order (``seq``), whatever order the actor's threads
      run ``post`` in. A command whose ``seq`` was delivered already is a consumer's re-send after
      an interruption, the newest command: it is delivered at once (commands are idempotent).
    * A message stays here until the consumer acknowledges it (``fetch(acked)``: every message
      with ``seq <= acked`` was received), so a ``fetch`` result the consumer never read (an
      interruption) is returned again by the next ``fetch``.
    """

    def __init__(self, group_bytes: int = 0, sender: ShmSender | None = None) -> None:
        self._cond = threading.Condition()
        # The one-host path: every Elements message is encoded by the sender, in outbox order
        # (under _send_lock); the writer entries given back (by the consumer, or with an
        # acknowledged message it never reads) are freed before the next write.
        self._sender = sender
        self._send_lock = threading.Lock()
        self._release_due: list[int] = []
        # Per outbox message, the writer entries to free once it is acknowledged.
        self._entries: collections.deque[list[int]] = collections.deque()
        self._waiting: dict[int, list[Any]] = {}  # commands that came before an earlier seq
        self._ready: collections.deque[Any] = collections.deque()
        self._next_command = 0
        self._outbox: collections.deque[Any] = collections.deque()
        # Grouping (see the module docstring): (elements, bytes) per outbox message, their sums,
        # and the messages that are not elements.
        self._group_bytes = group_bytes
        self._sizes: collections.deque[tuple[int, int]] = collections.deque()
        self._out_elements = self._out_bytes = self._out_other = 0
        self._loop_waits = False  # the loop waits for a command
        self._hurry = False
        # (generation, elements) sent in the latest generation, and of the latest credit: while
        # the loop waits with elements sent and not credited, it may wait for a credit.
        self._sent = (-1, 0)
        self._credited = (-1, 0)

    # --- the loop's side ----------------------------------------------------------------------------

    def send(self, message: Any) -> None:
        size = _message_bytes(message)
        with self._send_lock:
            if size[0]:
                gen, n = self._sent
                same = message.generation == gen
                self._sent = (gen, n + size[0]) if same else (message.generation, size[0])
            if self._sender is not None and size[1] >= 0:
                with self._cond:
                    release, self._release_due = self._release_due, []
                message, entries = self._sender.encode(message, release)
            else:
                entries = []
            with self._cond:
                self._outbox.append(message)
                self._sizes.append(size)
                self._entries.append(entries)
                self._count(size, 1)
                self._cond.notify_all()

    def receive(self, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._ready or timeout == 0:
                return self._ready.popleft() if self._ready else None
            self._loop_waits = True  # a fetch holding messages returns them now
            self._cond.notify_all()
            try:
                while not self._ready:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return None
                    self._cond.wait(left)
                return self._ready.popleft()
            finally:
                self._loop_waits = False

    # --- the actor methods' side --------------------------------------------------------------------

    def post(self, seq: int, message: Any) -> None:
        with self._cond:
            if isinstance(message, Consumed):
                credit = (message.generation, message.elements)
                self._credited = max(self._credited, credit)
            if seq < self._next_command:
                self._ready.append(message)  # a re-send: the newest command
            elif seq > self._next_command:
                self._waiting.setdefault(seq, []).append(message)
            else:
                self._ready.append(message)
                self._next_command += 1
                while self._next_command in self._waiting:
                    self._ready.extend(self._waiting.pop(self._next_command))
                    self._next_command += 1
            self._cond.notify_all()

    def _count(self, size: tuple[int, int], sign: int) -> None:
        elements, nbytes_ = size
        if nbytes_ < 0:
            self._out_other += sign
        else:
            self._out_elements += sign * elements
            self._out_bytes += sign * nbytes_

    def _group_ready(self) -> bool:
        return (
            self._hurry
            or self._loop_waits
            or self._out_other > 0
            or self._out_elements >= GROUP_ELEMENTS
            or self._out_bytes >= self._group_bytes
        )

    def _waits_for_credit(self) -> bool:
        gen, sent = self._sent
        credited = self._credited[1] if self._credited[0] == gen else 0
        return self._loop_waits and sent > credited

    def hurry(self) -> None:
        with self._cond:
            self._hurry = True
            self._cond.notify_all()

    def fetch(self, acked: int, wait_s: float, released: Iterable[int] = ()) -> list[Any]:
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._release_due.extend(released)  # parts the consumer gave back
            while self._outbox and self._outbox[0].seq <= acked:
                self._outbox.popleft()
                size = self._sizes.popleft()
                self._count(size, -1)
                # The entries of a message sent as it was (the consumer reads no part of it).
                self._release_due += self._entries.popleft()
            while not self._outbox:
                left = deadline - time.monotonic()
                if left <= 0 or self._waits_for_credit():
                    # Nothing to send and the loop may wait for a credit: the consumer's next
                    # fetch carries it, rather than this one waiting out wait_s.
                    return []
                self._cond.wait(left)
            # Hold them until they make a group (see the module docstring).
            hold_until = min(deadline, time.monotonic() + HOLD_SECONDS)
            while not self._group_ready():
                left = hold_until - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self._hurry = False
            return list(self._outbox)


class Location:
    """Where an actor runs: Ray node id and process id, whether its elements travel through
    shared memory (it runs on the consumer's node, see :mod:`grain_plugin_ray.shm_path`), and the
    address of its pipe transport when it has one (:mod:`grain_plugin_ray.pipe_path`; None: actor
    calls carry its elements)."""

    __slots__ = ("node_id", "pid", "pipe_address", "shared_memory")

    def __init__(
        self,
        node_id: str,
        pid: int,
        shared_memory: bool = False,
        pipe_address: str | None = None,
    ):
        self.node_id, self.pid, self.shared_memory = node_id, pid, shared_memory
        self.pipe_address = pipe_address

    def __repr__(self) -> str:
        return f"node {self.node_id[:12]}, pid {self.pid}"


class WorkerActor:
    """Worker ``index`` of ``job.worker_count``; see the module docstring. ``ahead_bytes`` is the
    worker loop's byte allowance (``RayRuntime.ahead_bytes``). With ``shm_prefix`` (made by the
    consumer) and when this actor runs on ``consumer_node``, elements travel through shared memory
    with segment names starting with ``shm_prefix``: with ``pipe_token`` (and the consumer's
    ``consumer_pid``) over the pipe transport (:mod:`grain_plugin_ray.pipe_path`), else in groups
    returned by ``fetch``."""

    def __init__(
        self,
        job: WorkerJob,
        index: int,
        ahead_bytes: int = AHEAD_BYTES,
        shm_prefix: str | None = None,
        consumer_node: str | None = None,
        pipe_token: str | None = None,
        consumer_pid: int | None = None,
    ):
        own_path = list(sys.path)
        job.environment.apply()
        # The consumer's paths first; this node's own after them (a remote node's interpreter may
        # live elsewhere than the consumer's).
        sys.path.extend(p for p in own_path if p not in sys.path)
        self._sender: ShmSender | None = None
        self._pipes: PipeServer | None = None
        local = False
        if shm_prefix is not None and usable():
            import ray

            local = ray.get_runtime_context().get_node_id() == consumer_node
        if local and pipe_token is not None and consumer_pid is not None and pipe_available():
            assert shm_prefix is not None
            self._loop = WorkerLoop(
                job, index, NOT_CONNECTED, size_of=nbytes, ahead_bytes=ahead_bytes
            )
            self._pipes = PipeServer(pipe_token, self._loop, shm_prefix, consumer_pid)
            return
        if local:
            assert shm_prefix is not None
            self._sender = ShmSender(shm_prefix)
        self._endpoint = ActorEndpoint(group_bytes=ahead_bytes * 3 // 8, sender=self._sender)
        self._loop = WorkerLoop(
            job, index, self._endpoint, size_of=nbytes, ahead_bytes=ahead_bytes
        )
        self._thread = threading.Thread(
            target=self._loop.run, name=f"grain_core-ray-worker-{index}", daemon=True
        )
        self._thread.start()

    def post(self, seq: int, message: Any) -> None:
        self._endpoint.post(seq, message)

    def fetch(
        self,
        acked: int,
        wait_s: float,
        credit: tuple[int, Any] | None = None,
        released: tuple[int, ...] = (),
    ) -> list[Any]:
        """``credit``: a ``(seq, Consumed)`` command the consumer sends with this call;
        ``released``: the numbers of the shared-memory parts it gave back."""
        if credit is not None:
            self._endpoint.post(*credit)
        return self._endpoint.fetch(acked, wait_s, released)

    def hurry(self) -> None:
        self._endpoint.hurry()

    def location(self) -> Location:
        import ray

        pipes = self._pipes
        return Location(
            ray.get_runtime_context().get_node_id(),
            os.getpid(),
            self._sender is not None or pipes is not None,
            None if pipes is None else pipes.address,
        )
