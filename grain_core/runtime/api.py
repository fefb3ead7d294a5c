"""The runtime API: run worker shares of a pipeline somewhere, consume them round-robin, exactly.

A *runtime* runs ``K`` workers; worker ``i`` builds the pipeline's iterator inside
:func:`grain_core.dataset.sharing.worker_share` ``(i, K)`` and produces its share of the elements.
The consumer takes one element from each worker in turn (worker 0's first element, worker 1's first,
...; an exhausted worker is skipped from then on), so the order depends only on the pipeline and
``K``, never on timing, and its state is exact. This module is the transport-neutral part, public
and documented in ``docs/runtime.md`` and ``docs/writing-plugins.md`` ("Write a runtime"):

* :class:`WorkerLoop` runs one worker share: build the iterator, answer :class:`Start` /
  :class:`Idle` / :class:`Consumed` / :class:`Stop` commands, emit :class:`Elements` (elements with
  the worker's state before the first of them), :class:`End`, :class:`Failure`. It talks to a
  :class:`WorkerEndpoint` (two methods) that a transport provides.
* :class:`RoundRobinConsumer` is the ``DatasetIterator`` the user holds: it keeps the exact state,
  checks a state before changing anything, restores states of other worker counts (elastic restore,
  :mod:`grain_core.dataset.elastic`), and talks to one :class:`Channel` per worker.
* A transport implements :class:`Runtime`: ``start_workers(job)`` starts ``job.worker_count`` workers
  that each call ``WorkerLoop(job, index, endpoint).run()`` after
  :meth:`WorkerEnvironment.apply`, and returns a :class:`WorkerPool` of channels. The built-in
  transport is :class:`grain_core.runtime.processes.ProcessRuntime` (processes + shared memory).
  Runtimes are registered by plugins with the ``register_runtimes`` hook and selected with
  ``mp_prefetch(options, runtime=...)``.

Messages are dataclasses. Every message from the consumer is idempotent (a generation number and
absolute counts), so a transport may deliver one twice, and a consumer interrupted (``Ctrl-C``, or
any exception raised into ``next()``) re-sends it. Every message from a worker carries ``seq``, its
number in that worker's stream, so the consumer applies each one once.

Flow control counts elements, and bytes for small ones: a worker has at most ``buffer_size + 1``
elements produced (or being produced) and not yet returned by the consumer's ``next()``:
``buffer_size`` (``MultiprocessingOptions.per_worker_buffer_size``) finished ones plus the one in
production, which is sent as soon as it is finished; beyond that it starts another element only
while those elements take under :data:`AHEAD_BYTES` (4 MiB) and number at most ``buffer_size + 1``
plus the elements returned since its last (re)start (so read-ahead grows with consumption, and a
restore starts as small as at ``buffer_size``): small elements travel many to a message without a
credit round trip each. The consumer sends a :class:`Consumed` count (a credit)
from ``next()`` as it hands elements out: when it has returned a whole message, inside the last
message it holds of that worker's once the rest fits the buffer, and after half a message (or half
the buffer, if more) since its last credit.

This module is the public import point of the runtime API (plugins, ``grain_core.author`` and the
docs name it); it only re-exports. Each concern lives in a module of its own:

* :mod:`grain_core.runtime.messages` — the typed messages (:class:`Start` ... :class:`Stats`,
  :class:`Position`, :class:`Mark`);
* :mod:`grain_core.runtime.job` — :class:`WorkerJob` and :class:`WorkerEnvironment`;
* :mod:`grain_core.runtime.transport` — the :class:`Runtime` / :class:`WorkerPool` /
  :class:`Channel` / :class:`WorkerEndpoint` protocols and :class:`WorkerError` /
  :class:`WorkerLostError`;
* :mod:`grain_core.runtime.worker` — :class:`WorkerLoop` and its flow-control constants;
* :mod:`grain_core.runtime.consumer` — :class:`RoundRobinConsumer` and :func:`next_or_rollback`.
"""

from __future__ import annotations

from grain_core.runtime.consumer import STATE_KIND, RoundRobinConsumer, next_or_rollback
from grain_core.runtime.job import WorkerEnvironment, WorkerJob
from grain_core.runtime.messages import (
    Consumed,
    Elements,
    End,
    Failure,
    Idle,
    Mark,
    Position,
    Start,
    Stats,
    Stop,
    Template,
)
from grain_core.runtime.transport import (
    Channel,
    Runtime,
    WorkerEndpoint,
    WorkerError,
    WorkerLostError,
    WorkerPool,
)
from grain_core.runtime.worker import AHEAD_BYTES, WorkerLoop

__all__ = [
    "Channel",
    "Consumed",
    "Elements",
    "End",
    "Failure",
    "Idle",
    "Mark",
    "Position",
    "Runtime",
    "RoundRobinConsumer",
    "Start",
    "Stats",
    "Stop",
    "Template",
    "WorkerEndpoint",
    "WorkerEnvironment",
    "WorkerError",
    "WorkerJob",
    "WorkerLoop",
    "WorkerLostError",
    "WorkerPool",
    "AHEAD_BYTES",
    "STATE_KIND",
    "next_or_rollback",
]
