"""What a transport implements: the :class:`Runtime` / :class:`WorkerPool` / :class:`Channel` /
:class:`WorkerEndpoint` protocols, and the errors a lost worker raises.

Part of the runtime API (:mod:`grain_core.runtime.api` re-exports these names; "Write a runtime" in
``docs/writing-plugins.md``). The built-in transport is
:class:`grain_core.runtime.processes.ProcessRuntime`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from grain_core.runtime.job import WorkerJob
from grain_core.runtime.messages import FromWorker, ToWorker

__all__ = ["Channel", "Runtime", "WorkerEndpoint", "WorkerError", "WorkerLostError", "WorkerPool"]


class WorkerError(RuntimeError):
    """A worker died, or raised an exception that could not be sent back as itself."""


class WorkerLostError(WorkerError):
    """A worker is gone (killed, crashed, disconnected); raised by :meth:`Channel.peek`."""


class WorkerEndpoint(Protocol):
    """The worker's end of a transport."""

    def send(self, message: FromWorker) -> None:
        """Delivers ``message`` to the consumer, in order. Called from the loop's thread and from
        its flusher thread, never both at once (the loop serialises its sends)."""

    def receive(self, timeout: float | None) -> ToWorker | None:
        """The next command; None when none came within ``timeout`` seconds (``None``: wait).
        Raises ``EOFError`` (or ``OSError``) when the consumer is gone."""


class Channel(Protocol):
    """The consumer's end of one worker's transport. The consumer calls it from one thread."""

    def send(self, message: ToWorker) -> None:
        """Delivers ``message`` to the worker, in order (it may be delivered twice). A
        :class:`Consumed` may overtake earlier messages (the process runtime sends it on a pipe
        of its own): it is absolute, a worker applies only those of its current generation, and
        one of a new generation is only ever sent after the worker answered that generation's
        :class:`Start`."""

    def peek(self, timeout: float) -> FromWorker | None:
        """The oldest message not yet dropped, without removing it; None when none came within
        ``timeout``. Raises :class:`WorkerLostError` (saying how) when the worker is gone and every
        message it sent was dropped."""

    def drop(self) -> None:
        """Removes the message :meth:`peek` returned."""


class WorkerPool(Protocol):
    """Started workers: one channel each."""

    channels: Sequence[Channel]

    def close(self) -> None:
        """Stops the workers and frees what they hold. Idempotent; safe from any thread, from a
        finalizer and at interpreter exit."""


@runtime_checkable
class Runtime(Protocol):
    """A transport: starts ``job.worker_count`` workers; worker ``i`` calls
    ``job.environment.apply()`` then ``WorkerLoop(job, i, endpoint).run()``."""

    def start_workers(self, job: WorkerJob) -> WorkerPool: ...
