"""The consumer side: a ``WorkerPool`` of Ray actors, one ``Channel`` per actor.

The kernel's :class:`~grain_core.runtime.api.RoundRobinConsumer` (what ``mp_prefetch`` returns)
reads the channels; this module only moves messages:

* :meth:`RayChannel.send` calls the actor's ``post`` with the next sequence number (no wait).
  ``Consumed`` credits are coalesced and ride on the next ``fetch`` call. One is posted on its
  own only when it frees half of the actor's buffer or three quarters of its byte allowance
  (``RayRuntime.ahead_bytes``, counted with the size of the latest element received; at most half
  the elements the worker loop's count bound lets the actor hold ahead, so credits grow
  geometrically from the start), and before the consumer waits for an actor that may be waiting
  for it (:meth:`RayChannel._may_wait_for`); an actor call per element returned would cost more
  than producing small elements.
* :meth:`RayChannel.peek` keeps one ``fetch`` call in flight per actor; when it completes, its
  messages are queued here and the next ``fetch`` (acknowledging them) is issued at once, so the
  actor's output is always on its way. The actor holds a fetch's messages until they make a group
  (:mod:`grain_plugin_ray.actor`); when the consumer waits for this actor (``peek`` with a
  timeout, nothing queued, the fetch not done) before its first elements since a (re)start, it
  posts ``hurry`` once for that fetch. The object reference of a completed call is dropped as soon as its result is
  read: Ray frees the object once the elements taken from it are dropped too.
* A dead actor (``ray.kill``, a crash, a lost node) makes the pending ``fetch`` fail with
  ``RayActorError``; the channel raises :class:`~grain_core.runtime.api.WorkerLostError` saying
  which actor, where it ran and why, and the consumer reports the worker and output position. An
  actor Ray cannot place within ``RayRuntime.start_timeout_s`` is reported the same way.
  With ``RayRuntime.max_restarts`` the channel first replaces a dead actor (up to that many times
  per worker): the new actor starts where the last message received from the old one ended
  (:class:`~grain_plugin_ray.resume.ResumePoint`), so the consumer sees the same stream.
* Groups of actors on the consumer's node arrive as shared-memory descriptors
  (:mod:`grain_plugin_ray.shm_path`): :meth:`RayChannel.peek` copies them out into fresh arrays
  before it acknowledges them.
* :meth:`RayWorkerPool.close` kills every actor (``ray.kill``, no restart), then unlinks what is
  left of their shared-memory segments once their processes are gone. The consumer calls it at
  ``close()``, ``with`` exit, garbage collection and interpreter exit.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from grain_core.author import AHEAD_BYTES, Consumed, PipeChannel, PipePool, WorkerLostError, nbytes
from grain_plugin_ray.pipe_path import ActorPipeWorker, hand_over, local_pipes
from grain_plugin_ray.resume import ResumePoint
from grain_plugin_ray.shm_path import Lending, ShmReceiver, forget_prefix, wait_gone


class PlacementSettings(Protocol):
    """What the pool reads of its ``RayRuntime`` (kept as a protocol so that this module does not
    import ``runtime``, which imports it)."""

    @property
    def start_timeout_s(self) -> float: ...
    @property
    def num_cpus(self) -> float: ...
    @property
    def resources(self) -> Mapping[str, float]: ...
    @property
    def max_restarts(self) -> int: ...


_log = logging.getLogger(__name__)

__all__ = ["RayChannel", "RayWorkerPool"]

#: How long one ``fetch`` call waits in the actor for a message before returning empty.
FETCH_WAIT_SECONDS = 1.0
#: The most elements one coalesced credit may stand for (tiny elements under a large allowance).
MAX_CREDIT_STEP = 1 << 16


class RayChannel:
    """The consumer's end of one worker actor (used from the consumer's thread)."""

    def __init__(self, pool: RayWorkerPool, index: int, actor: Any, name: str):
        self._pool = pool
        self.index = index
        self.actor = actor
        self.name = self._base_name = name
        self._seq = 0
        self._inbox: collections.deque[Any] = collections.deque()
        self._fetch: Any = None  # the fetch call in flight
        self._hurried = False  # whether hurry() was posted for it
        self._starting = True  # no elements received since the last command was posted
        self._acked = 0  # seq of the last message received (every earlier one was too)
        self._lending = Lending()  # this actor's shared-memory parts the user holds
        # Answered once the actor was placed and its constructor (the pipeline build) finished.
        self._location_ref = actor.location.remote()
        self._placed = False
        self._started_at = time.monotonic()
        self.lost: str | None = None
        self.restarts = 0
        self._resume = ResumePoint()
        self._to_post: list[Any] = []  # a replacement's first commands, not posted yet
        # Credits: posted when they free half of the actor's buffer (the actor never waits for
        # more), or before the consumer waits for this actor.
        self._credit_step = max(1, pool.buffer_size // 2)
        self._element_bytes = 0  # nbytes of the first element of the latest group received
        # The actor's byte accounting, replayed: (elements received in the command's generation
        # up to the end of a message, that message's estimated bytes), and the generation.
        self._received: collections.deque[tuple[int, int]] = collections.deque()
        self._received_count = 0
        self._received_gen = -1
        self._credit_posted = (-1, 0)  # (generation, elements) of the last Consumed posted
        self._credit_due: Consumed | None = None
        # The pipe path (grain_plugin_ray.pipe_path): until the actor's location says whether it
        # has one, commands are held here; then they go to the pipe channel, or are posted.
        self._pipe: PipeChannel | None = None
        self._token = pool.pipe_tokens[index] if pool.pipe_tokens is not None else None
        self._held: list[Any] = []
        self._handoff: list[Any] | None = None  # the actor's ends, until it has them
        self._handoffs = 0  # hand-overs tried

    def send(self, message: Any) -> None:
        if self.lost is not None or self._pool.closed:
            return
        if self._token is not None or self._held:  # not connected yet, or the held not all sent
            self._held.append(message)
            if self._token is None:
                self._send_held()
            return
        self._send_now(message)

    def _send_held(self) -> None:
        while self._held:  # removed after the send: an interruption only sends it twice
            self._send_now(self._held[0])
            self._held.pop(0)

    def _send_now(self, message: Any) -> None:
        if self._pipe is not None:
            self._pipe.send(message)
            return
        if isinstance(message, Consumed):
            gen, posted = self._credit_posted
            step = self._credit_step
            if self._element_bytes:
                # Three quarters of the actor's byte allowance, and at most half of what its
                # count bound (buffer + 1 + the elements credited) lets it hold. Credits ride on
                # fetch calls (a fetch follows each group received, and groups take 3/8 of the
                # allowance), so this post is only for a consumer that stops fetching.
                by_bytes = 3 * self._pool.ahead_bytes // (4 * self._element_bytes)
                by_count = (self._pool.buffer_size + posted) // 2
                step = max(step, min(by_bytes, by_count, MAX_CREDIT_STEP))
            if gen == message.generation and message.elements - posted < step:
                self._credit_due = message
                return
            posted_now = (message.generation, message.elements)
        else:  # a new command: a credit of the old generation is moot
            posted_now = (getattr(message, "generation", -1), 0)
            self._starting = True
        # Recorded after the post: an interruption between them only posts a credit twice.
        self._post(message)
        self._credit_posted, self._credit_due = posted_now, None

    def _post(self, message: Any) -> None:
        self._post_replacement_commands()
        message = self._resume.sent(message)
        # Interrupted between the two lines, the consumer re-sends and reuses this seq: the actor
        # delivers that re-send too (see ActorEndpoint.post).
        self.actor.post.remote(self._seq, message)
        self._seq += 1

    def _post_replacement_commands(self) -> None:
        while self._to_post:
            # Removed after the post: an interruption between them only posts it twice.
            self.actor.post.remote(self._seq, self._resume.sent(self._to_post[0]))
            self._seq += 1
            self._to_post.pop(0)

    def _replace(self, reason: str) -> None:
        """Starts a new actor for this worker where the dead one's stream was received up to."""
        import ray

        self.restarts += 1
        old = self.actor
        name = f"{self._base_name}-r{self.restarts}"
        actor = self._pool.spawn(self.index, name)
        _log.warning(
            "grain_core Ray worker %d: actor %s %s; replaced by %s (restart %d of %d).",
            self.index, self.name, reason, name, self.restarts, self._pool.runtime.max_restarts,
        )
        commands = self._resume.replacement()
        self._pool.release_shm([(self.name, self._pid())])
        self.actor, self.name = actor, name
        self._seq, self._acked, self._fetch = 0, 0, None
        self._lending = Lending()  # the new actor numbers its parts afresh
        self._location_ref = actor.location.remote()
        self._placed, self._started_at = False, time.monotonic()
        self._to_post = commands
        for gone in (old, actor) if self._pool.closed else (old,):  # closed from another thread
            try:
                ray.kill(gone, no_restart=True)
            except Exception:
                pass
        if not self._pool.closed:
            self._post_replacement_commands()

    def peek(self, timeout: float) -> Any:
        import ray
        from ray.exceptions import RayActorError

        if self._pipe is not None:
            if self._token is not None:  # interrupted while connecting: go on
                if not self._resolve(timeout):
                    return None
            self._send_held()
            return self._pipe.peek(timeout)
        if self._inbox:
            return self._inbox[0]
        if self.lost is not None:
            raise WorkerLostError(self.lost)
        if self._pool.closed:
            raise WorkerLostError("(closed)")
        if self._token is not None:
            if not self._resolve(timeout):
                return None
            if self._pipe is not None:
                return self._pipe.peek(timeout)
        self._send_held()
        self._post_replacement_commands()
        due = self._credit_due
        if due is not None and self._may_wait_for(due):
            # The consumer waits for this actor, which may be waiting for this credit.
            self._post(due)
            self._credit_posted = (due.generation, due.elements)
            self._credit_due = None
        if self._fetch is None:
            self._issue_fetch()
        done: list[Any] = []
        if timeout > 0 and self._starting and not self._hurried:
            # The consumer waits for this actor's first elements since a (re)start: the fetch
            # need not hold them for a group. (Later, holding costs no throughput: the consumer
            # waits only when it is faster than the actors.)
            done, _ = ray.wait([self._fetch], timeout=0)
            if not done:
                self.actor.hurry.remote()
                self._hurried = True
        if not done:
            done, _ = ray.wait([self._fetch], timeout=timeout)
        if not done:
            if not self._placed:
                self._check_placed()
            return None
        try:
            messages = ray.get(self._fetch)
        except RayActorError as e:
            reason = f"died: {_first_line(e)}"
            if self._pool.can_replace and self.restarts < self._pool.runtime.max_restarts:
                self._replace(f"({self._where()}) {reason}")
                return None
            self.lost = f"({self._where()}) {reason}"
            if self.restarts:
                self.lost += f" (after {self.restarts} restart(s) of this worker)"
            raise WorkerLostError(self.lost) from None
        # An interruption anywhere below loses nothing: messages stay in the actor until
        # acknowledged by a later fetch, and the consumer applies a repeated message once.
        try:
            new = [
                self._pool.decode(m, self.name, self._lending)
                for m in messages
                if m.seq > self._acked
            ]
        except OSError as e:
            self.lost = f"({self._where()}) {e}"
            raise WorkerLostError(self.lost) from None
        if new:
            self._placed = True
            seen = [self._resume.received_message(m) for m in new]  # idempotent per message
            for m in new:
                self._count_received(m)
            elements = getattr(new[-1], "elements", None)
            if elements:
                self._starting = False
                self._element_bytes = max(1, nbytes(elements[0]))
            self._inbox.extend(m for m in seen if m is not None)
            self._acked = new[-1].seq
        # The next fetch is on its way while these messages are consumed; dropping the reference
        # to the finished one lets Ray free its object.
        self._issue_fetch()
        return self._inbox[0] if self._inbox else None

    def _resolve(self, timeout: float) -> bool:
        """Waits up to ``timeout`` for the actor's location; once it is known, connects to the
        actor's pipe transport if it has one, and sends the commands held meanwhile. False while
        it is not known; raises ``WorkerLostError`` when the actor died or was not placed in
        time."""
        import ray
        from ray.exceptions import RayActorError

        done, _ = ray.wait([self._location_ref], timeout=timeout)
        if not done:
            self._check_placed()
            return False
        try:
            loc = ray.get(done[0])
        except RayActorError as e:
            self.lost = f"(Ray actor {self.name}) died: {_first_line(e)}"
            raise WorkerLostError(self.lost) from None
        self._placed = True
        if loc.pipe_address is not None:
            self._connect(loc.pipe_address)
        self._token = None
        self._send_held()
        return True

    def _connect(self, address: str) -> None:
        """Attaches this actor's pipes to the pool's ``PipePool`` and hands the actor its ends
        (see :mod:`grain_plugin_ray.pipe_path`). Interrupted anywhere, it is called again and
        goes on where it was."""
        pipes = self._pool.pipes
        assert self._token is not None and pipes is not None
        if self._pipe is None:
            ends, conn, credits = local_pipes()
            self._handoff = ends
            try:
                self._pipe = pipes.attach(ActorPipeWorker(self._describe_loss), conn, credits)
            except RuntimeError:  # closed from another thread meanwhile
                raise WorkerLostError("(closed)") from None
        ends = self._handoff
        if ends is None:
            return
        self._handoffs += 1
        try:
            hand_over(address, self._token, ends)
        except OSError as e:
            # A first hand-over refused: the actor is gone. A later one: the actor took an
            # earlier (interrupted) one, or is gone, which the pipe's end then reports.
            if self._handoffs == 1:
                self.lost = f"({self._where()}) refused its pipes: {e}"
                raise WorkerLostError(self.lost) from None
        for end in ends:  # the actor holds its own copies now
            end.close()
        self._handoff = None

    def _describe_loss(self) -> str:
        """How an actor on the pipe path was lost (its pipe ended), with Ray's reason."""
        import ray
        from ray.exceptions import RayActorError

        reason = "closed its pipe"
        try:
            ray.get(self.actor.location.remote(), timeout=1.0)
        except RayActorError as e:
            reason = f"died: {_first_line(e)}"
        except Exception:  # still alive and busy, or Ray is shutting down
            pass
        return f"({self._where()}) {reason}"

    def _issue_fetch(self) -> None:
        """Calls the actor's ``fetch``, carrying the credit due (if any) with it: no call of its
        own for that credit."""
        due = self._credit_due
        credit = None
        if due is not None and not self._to_post:
            credit = (self._seq, self._resume.sent(due))
        released = self._lending.ready(self._acked)
        self._fetch = self.actor.fetch.remote(
            self._acked, FETCH_WAIT_SECONDS, credit, tuple(released)
        )
        self._lending.given(released)  # after the call: an interruption only sends them twice
        self._hurried = False
        if credit is not None and due is not None:  # after the call: an interruption only
            # posts the credit twice
            self._seq += 1
            self._credit_posted = (due.generation, due.elements)
            self._credit_due = None

    def _count_received(self, message: Any) -> None:
        elements = getattr(message, "elements", None)
        if elements is None or message.generation != self._credit_posted[0]:
            return
        if message.generation != self._received_gen:
            self._received.clear()
            self._received_count, self._received_gen = 0, message.generation
        n = len(elements)
        if n:
            self._received_count += n
            # As the actor's worker loop counts them: ``nbytes`` of every element.
            self._received.append((self._received_count, sum(map(nbytes, elements))))

    def _may_wait_for(self, due: Consumed) -> bool:
        """Whether the actor may be waiting for credit ``due`` with nothing to send: the
        consumer, about to wait for it, has returned everything received from it, so a fetch in
        flight would return nothing until it carries the credit. The actor waits for a credit
        when it holds more than its buffer ahead of the credits it has and either more than
        ``buffer + credited`` elements or ``ahead_bytes`` of messages not wholly credited; this
        replays that account over the messages received (every one it sent, when it has nothing
        to send), the bytes as its worker loop counts them (``nbytes`` of every element), with a
        margin of 4/3. True whenever unsure (a start, a replacement). (With the bytes estimated
        from two elements per message and a margin of 2, a consumer waiting for a CPU-bound actor
        posted a credit every 32 elements of 256 KiB, an actor call each, that no actor waited
        for.)"""
        gen, posted = self._credit_posted
        if self._starting or self.restarts or gen != due.generation or gen != self._received_gen:
            return True
        pool = self._pool
        ahead = self._received_count - posted
        if ahead <= pool.buffer_size:
            return False
        if ahead > pool.buffer_size + posted:
            return True
        received = self._received
        while received and received[0][0] <= posted:
            received.popleft()
        return 4 * sum(size for _, size in received) >= 3 * pool.ahead_bytes

    def drop(self) -> None:
        if self._pipe is not None:
            self._pipe.drop()
        elif self._inbox:
            self._inbox.popleft()

    def location(self, timeout: float | None = None) -> Any:
        """Where the actor runs (:class:`grain_plugin_ray.actor.Location`), once it is placed."""
        import ray

        return ray.get(self._location_ref, timeout=timeout)

    def _pid(self) -> int | None:
        """The actor's pid when it runs on this node with shared memory and has said so."""
        import ray

        try:
            done, _ = ray.wait([self._location_ref], timeout=0)
            if done:
                loc = ray.get(done[0])
                return loc.pid if loc.shared_memory else None
        except Exception:
            pass
        return None

    def _where(self) -> str:
        import ray

        where = f"Ray actor {self.name}"
        try:
            done, _ = ray.wait([self._location_ref], timeout=0)
            if done:
                where += f" on {ray.get(done[0])!r}"
        except Exception:
            pass
        return where

    def _check_placed(self) -> None:
        """Raises ``WorkerLostError`` when the actor is still not placed and built
        ``start_timeout_s`` after the pool started."""
        import ray

        rt = self._pool.runtime
        if time.monotonic() - self._started_at < rt.start_timeout_s:
            return
        done, _ = ray.wait([self._location_ref], timeout=0)
        if done:
            self._placed = True
            return
        try:
            available = {k: v for k, v in ray.available_resources().items() if "node:" not in k}
        except Exception:  # pragma: no cover
            available = {}
        self.lost = (
            f"(Ray actor {self.name}) was not running {rt.start_timeout_s} s after it was created "
            f"(Ray could not place it, or it is still building its pipeline: each actor needs "
            f"num_cpus={rt.num_cpus} and resources={dict(rt.resources)}, the cluster has "
            f"{available} available; lower RayRuntime.num_cpus or the worker count, add nodes, or "
            "raise RayRuntime.start_timeout_s)"
        )
        raise WorkerLostError(self.lost)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    reason = next((ln for ln in text.splitlines() if "The actor is dead because" in ln), None)
    return f"{type(e).__name__}: {reason.strip() if reason else text.splitlines()[0]}"


class RayWorkerPool:
    """``job.worker_count`` :class:`~grain_plugin_ray.actor.WorkerActor` actors; see the module
    docstring."""

    def __init__(
        self,
        runtime: PlacementSettings,
        actors: list[Any],
        names: list[str],
        buffer_size: int = 1,
        spawn: Callable[[int, str], Any] | None = None,
        ahead_bytes: int = AHEAD_BYTES,
        shm_prefixes: dict[str, str] | None = None,
        pipe_tokens: list[str] | None = None,
    ):
        self.runtime = runtime
        #: The pipe path (grain_plugin_ray.pipe_path): each actor's token, and the pool its pipes
        #: join (None: every actor's elements come through actor calls).
        self.pipe_tokens = pipe_tokens
        self.pipes: PipePool | None = PipePool() if pipe_tokens is not None else None
        # The one-host path: actor name -> its segments' prefix (filled by spawn), and the
        # reader of every actor's segments.
        self._shm_prefixes = shm_prefixes
        self._receiver = ShmReceiver() if shm_prefixes is not None else None
        self._spawn = spawn
        self._replacements: list[Any] = []  # every replacement actor started (killed at close)
        #: Elements each actor may hold ahead of ``next()`` (the actors' ``WorkerJob.buffer_size``).
        self.buffer_size = buffer_size
        #: Bytes of finished elements each actor may hold ahead (``RayRuntime.ahead_bytes``).
        self.ahead_bytes = ahead_bytes
        self.closed = False
        self.channels = [RayChannel(self, i, a, n) for i, (a, n) in enumerate(zip(actors, names))]

    def decode(self, message: Any, actor: str, lending: Lending) -> Any:
        """``message`` with a shared-memory group read back into ``Elements`` (lent views of its
        large parts, given back through ``lending``; see :mod:`grain_plugin_ray.shm_path`)."""
        if self._receiver is None:
            return message
        return self._receiver.decode(message, actor, lending)

    def release_shm(self, actors: list[tuple[str, int | None]]) -> None:
        """Unlinks what is left of these dead (or killed) actors' segments (by actor name), once
        each process (pid, where known) is gone."""
        if self._shm_prefixes is None:
            return
        wait_gone([pid for _, pid in actors if pid is not None])
        for name, _ in actors:
            prefix = self._shm_prefixes.pop(name, None)
            if prefix is not None:
                forget_prefix(prefix)

    @property
    def can_replace(self) -> bool:
        """Whether :meth:`spawn` can start replacement actors."""
        return self._spawn is not None and not self.closed

    def spawn(self, index: int, name: str) -> Any:
        """Starts a replacement actor for worker ``index`` (killed by :meth:`close` whatever
        happens to it)."""
        assert self._spawn is not None
        actor = self._spawn(index, name)
        self._replacements.append(actor)
        return actor

    @property
    def actor_names(self) -> list[str]:
        """The actors' names in the ``grain_core`` Ray namespace (for monitoring and tests)."""
        return [c.name for c in self.channels]

    def close(self) -> None:
        """Kills the actors. Idempotent; safe from any thread, a finalizer and interpreter exit."""
        if self.closed:
            return
        self.closed = True
        if self.pipes is not None:
            try:
                self.pipes.close()  # Stop to each actor on a pipe, the pipes closed
            except Exception:  # pragma: no cover - interpreter exit
                pass
        pids: list[int | None] = []
        try:
            import ray

            if ray.is_initialized():  # else Ray shut down already: its actors went with it
                if self._shm_prefixes is not None:
                    pids = [c._pid() for c in self.channels]
                for actor in [c.actor for c in self.channels] + self._replacements:
                    try:
                        ray.kill(actor, no_restart=True)
                    except Exception:
                        pass
        except Exception:  # interpreter exit: modules may be half torn down
            pass
        try:
            if self._shm_prefixes is not None:
                self.release_shm(
                    list(zip([c.name for c in self.channels], pids))
                    + [(name, None) for name in list(self._shm_prefixes)]
                )
            if self._receiver is not None:
                self._receiver.close()
        except Exception:  # pragma: no cover - interpreter exit
            pass
