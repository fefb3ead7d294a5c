"""The worker side: a Ray actor running one worker share through the kernel's ``WorkerLoop``.

:class:`WorkerActor` (made a Ray actor by :class:`grain_plugin_ray.pool.RayWorkerPool`) applies the
job's :class:`~grain_core.runtime.api.WorkerEnvironment`, then runs
``WorkerLoop(job, index, endpoint).run()`` in a thread of the actor, exactly as a worker process of
``mp_prefetch`` does, so the actor produces the same elements with the same states. The loop talks
to an :class:`ActorEndpoint`: two queues that the actor's methods fill and drain.

* ``post(seq, message)``: a command from the consumer. Calls of a threaded actor may run out of
  order, so commands carry the consumer's sequence number and the endpoint hands them to the loop
  in that order.
* ``fetch(acked, wait_s)``: every message the loop sent after message ``acked``, waiting up to
  ``wait_s`` seconds for the first. Batches of elements travel as the method's return value, through Ray's
  object store (numpy leaves of large results are zero-copy views for the consumer).
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from typing import Any

from grain_core.author import AHEAD_BYTES, WorkerJob, WorkerLoop, nbytes

__all__ = ["ActorEndpoint", "Location", "WorkerActor"]


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

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: dict[int, list[Any]] = {}  # commands that came before an earlier seq
        self._ready: collections.deque[Any] = collections.deque()
        self._next_command = 0
        self._outbox: collections.deque[Any] = collections.deque()

    # --- the loop's side ----------------------------------------------------------------------------

    def send(self, message: Any) -> None:
        with self._cond:
            self._outbox.append(message)
            self._cond.notify_all()

    def receive(self, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._ready:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
            return self._ready.popleft()

    # --- the actor methods' side --------------------------------------------------------------------

    def post(self, seq: int, message: Any) -> None:
        with self._cond:
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

    def fetch(self, acked: int, wait_s: float) -> list[Any]:
        deadline = time.monotonic() + wait_s
        with self._cond:
            while self._outbox and self._outbox[0].seq <= acked:
                self._outbox.popleft()
            while not self._outbox:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(left)
            return list(self._outbox)


class Location:
    """Where an actor runs: Ray node id and process id."""

    __slots__ = ("node_id", "pid")

    def __init__(self, node_id: str, pid: int):
        self.node_id, self.pid = node_id, pid

    def __repr__(self) -> str:
        return f"node {self.node_id[:12]}, pid {self.pid}"


class WorkerActor:
    """Worker ``index`` of ``job.worker_count``; see the module docstring. ``ahead_bytes`` is the
    worker loop's byte allowance (``RayRuntime.ahead_bytes``)."""

    def __init__(self, job: WorkerJob, index: int, ahead_bytes: int = AHEAD_BYTES):
        own_path = list(sys.path)
        job.environment.apply()
        # The consumer's paths first; this node's own after them (a remote node's interpreter may
        # live elsewhere than the consumer's).
        sys.path.extend(p for p in own_path if p not in sys.path)
        self._endpoint = ActorEndpoint()
        self._loop = WorkerLoop(
            job, index, self._endpoint, size_of=nbytes, ahead_bytes=ahead_bytes
        )
        self._thread = threading.Thread(
            target=self._loop.run, name=f"grain_core-ray-worker-{index}", daemon=True
        )
        self._thread.start()

    def post(self, seq: int, message: Any) -> None:
        self._endpoint.post(seq, message)

    def fetch(self, acked: int, wait_s: float) -> list[Any]:
        return self._endpoint.fetch(acked, wait_s)

    def location(self) -> Location:
        import ray

        return Location(ray.get_runtime_context().get_node_id(), os.getpid())
