"""The consumer side: round-robin over ``num_workers`` Ray actors with ``mp_prefetch``'s state.

Contract (see ``docs/ray.md``):

* Worker ``i`` of ``K`` is a Ray actor (:class:`grain_plugin_ray.worker.ShareWorker`) building the
  pipeline inside ``worker_share(i, K)``, like an ``mp_prefetch`` worker process. The output is
  round-robin over the workers (an exhausted worker is skipped from then on): the same elements in
  the same order as ``mp_prefetch`` with ``K`` workers, never depending on timing.
* ``get_state()`` has ``mp_prefetch``'s format (kind ``MultiprocessPrefetchDatasetIterator``): per
  worker the state before its current batch, how many of the batch were consumed, whether it is
  exhausted, and whose turn is next. So a state moves between this iterator and ``mp_prefetch``
  with the same worker count, and with another count (or in process) wherever ``mp_prefetch``
  allows elastic restore (:mod:`grain_core.runtime.elastic`); elsewhere it is refused with
  :class:`grain_core.state.StateMismatchError` before anything changes.
* Flow control: each actor has at most ``per_worker_buffer_size`` calls in flight; a call returns a
  batch of at most ``RayRuntime.elements_per_call`` elements. Batches come through Ray's object
  store (numpy leaves of large batches are read-only zero-copy views of it); a batch's object is
  released as soon as it has been fetched.
* Failures: an exception in a worker is re-raised here (same type when it unpickles, with the
  worker's traceback and the output position in a note; else :class:`RayWorkerError`). A dead actor
  raises :class:`RayWorkerError` naming the worker and the output position as soon as Ray reports
  it. Recovery: a new iterator restored from the last saved state continues exactly.
* ``close()``, ``with``, garbage collection and interpreter exit kill every actor
  (``ray.kill``).
"""

from __future__ import annotations

import collections
import os
import pickle
import sys
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from grain_core import state as gstate
from grain_core.dataset import DatasetIterator, IterDataset, PrefetchIterDataset, dataset_tree
from grain_core.options import MultiprocessingOptions
from grain_core.plugins.registry import get_registry
from grain_core.runtime import elastic
from grain_core.runtime.multiprocess import WorkerError
from grain_plugin_ray.messages import (
    Batch,
    Failure,
    Ready,
    Request,
    StartFrom,
    WorkerEnvironment,
)
from grain_plugin_ray.runtime import RayRuntime
from grain_plugin_ray.worker import ENV_PREFIX, ShareWorker

__all__ = ["ACTOR_NAMESPACE", "RayPrefetchDatasetIterator", "RayWorkerError"]

STATE_KIND = elastic.MP_KIND  # mp_prefetch's state kind: states are interchangeable
ACTOR_NAMESPACE = "grain_core"
_POLL_SECONDS = 0.1


class RayWorkerError(WorkerError):
    """A worker actor died, could not be placed, or raised an exception that could not be sent
    back as itself."""


def _kill(actors: list[Any], inflight: list[Any]) -> None:
    """Kills the actors (no restart) and drops every pending object reference."""
    for q in inflight:
        q.clear()
    if not actors:
        return
    try:
        import ray

        if not ray.is_initialized():
            return  # Ray shut down already: its actors went with it
        for a in actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:
                pass
    finally:
        actors.clear()


def worker_environment() -> WorkerEnvironment:
    """The consumer's environment as the actors should see it."""
    return WorkerEnvironment(
        sys_path=tuple(sys.path),
        env={k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)},
        plugin_modules=tuple(get_registry().explicit_module_names()),
    )


class RayPrefetchDatasetIterator(DatasetIterator):
    """Round-robin over ``options.num_workers`` Ray actors; see the module docstring.

    The actors are created (and start building their pipelines) with the iterator; they produce
    elements from the first ``next()`` / ``start_prefetch()`` on, at the position last given by
    ``set_state``.
    """

    def __init__(
        self,
        parent: IterDataset,
        options: MultiprocessingOptions,
        worker_init_fn: Callable[[int, int], None] | None,
        runtime: RayRuntime,
    ):
        super().__init__()
        import cloudpickle
        import ray

        k = options.num_workers
        self._k = k
        self._parent_ds = parent
        self._runtime = runtime
        self._buffer = options.per_worker_buffer_size
        self._actors: list[Any] = []
        self._inflight: list[collections.deque] = [collections.deque() for _ in range(k)]
        # The finalizer holds the lists, not self: GC and interpreter exit kill the actors.
        self._finalizer = weakref.finalize(self, _kill, self._actors, self._inflight)
        self._closed = False
        runtime.connect()
        payload = ray.put(cloudpickle.dumps((parent, worker_init_fn)))
        env = worker_environment()
        actor_class = ray.remote(ShareWorker)
        tag = uuid.uuid4().hex[:12]
        self.actor_names = [f"grain_core-ray-{tag}-w{i}" for i in range(k)]
        try:
            for i in range(k):
                opts = runtime.actor_options(self.actor_names[i], ACTOR_NAMESPACE)
                self._actors.append(actor_class.options(**opts).remote(payload, i, k, env))
        except BaseException:
            self._finalizer()
            raise
        self._ready_refs = [a.ready.remote() for a in self._actors]
        self._ready: list[Ready | None] = [None] * k
        self._created = time.monotonic()
        self._gen = 0
        self._started = False
        self._error: BaseException | None = None
        self._queues: list[collections.deque] = [collections.deque() for _ in range(k)]
        self._outcome: list[Failure | str | None] = [None] * k  # after the queued elements
        self._limit = [1] * k
        self._wstate: list[Any] = [None] * k
        self._wskip = [0] * k
        self._exhausted = [False] * k
        self._next = 0
        self._position = 0

    # --- actors ------------------------------------------------------------------------------------

    @property
    def actors(self) -> list[Any]:
        """The worker actors' handles (empty once closed)."""
        return list(self._actors)

    def _wait(self, ref: Any, i: int, what: str, deadline: float | None = None) -> Any:
        """``ray.get(ref)`` for worker ``i``, failing clearly if it died or ``deadline`` passes."""
        import ray
        from ray.exceptions import RayActorError

        while True:
            if self._closed:
                raise RuntimeError("This iterator was closed while waiting for an element.")
            done, _ = ray.wait([ref], timeout=_POLL_SECONDS)
            if done:
                try:
                    return ray.get(ref)
                except RayActorError as e:
                    self._error = self._dead(i, e)
                    raise self._error from None
            if deadline is not None and time.monotonic() > deadline:
                self._error = RayWorkerError(
                    f"Ray worker actor {i} of {self._k} was not ready {self._runtime.start_timeout_s} "
                    f"s after it was created ({what}). Ray may be unable to place it: each actor "
                    f"needs num_cpus={self._runtime.num_cpus} and resources="
                    f"{dict(self._runtime.resources)}; the cluster has {ray.available_resources()} "
                    "available. Lower RayRuntime.num_cpus, add nodes, or raise start_timeout_s."
                )
                raise self._error

    def _ready_of(self, i: int) -> Ready:
        r = self._ready[i]
        if r is None:
            deadline = self._created + self._runtime.start_timeout_s
            r = self._wait(self._ready_refs[i], i, "building its pipeline", deadline)
            self._ready[i] = r
        return r

    def _dead(self, i: int, cause: BaseException) -> RayWorkerError:
        r = self._ready[i]
        where = f" (node {r.node_id[:12]}, pid {r.pid})" if r is not None else ""
        return RayWorkerError(
            f"Ray worker actor {i} of {self._k}{where} died while the iterator waited for output "
            f"element #{self._position}: {type(cause).__name__}: {str(cause).splitlines()[0]} "
            "Its node may have failed or the actor was killed. Restore the last saved state into a "
            "new iterator to continue exactly where it was saved."
        )

    # --- reading -----------------------------------------------------------------------------------

    def _request(self, i: int, start: StartFrom | None) -> None:
        rt = self._runtime
        req = Request(self._gen, self._limit[i], rt.bytes_per_call, rt.seconds_per_call, start)
        self._limit[i] = min(self._limit[i] * 2, rt.elements_per_call)
        self._inflight[i].append(self._actors[i].produce.remote(req))

    def _ensure_started(self) -> None:
        if self._started:
            return
        self._started = True
        k = self._k
        for i in [(self._next + j) % k for j in range(k)]:
            self._inflight[i].clear()
            self._limit[i] = 1
            if not self._exhausted[i]:
                self._request(i, StartFrom(self._wstate[i], self._wskip[i]))
                for _ in range(self._buffer - 1):
                    self._request(i, None)

    def start_prefetch(self) -> None:
        if not self._closed:
            self._ensure_started()

    def __next__(self) -> Any:
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        if self._error is not None:
            raise self._error
        self._ensure_started()
        k = self._k
        while True:
            i = self._next
            if self._exhausted[i]:
                if all(self._exhausted):
                    raise StopIteration
                self._next = (i + 1) % k
                continue
            q = self._queues[i]
            if not q:
                self._receive(i)
                continue
            x = q.popleft()
            self._wskip[i] += 1
            self._next = (i + 1) % k
            self._position += 1
            return x

    def _receive(self, i: int) -> None:
        """Takes worker ``i``'s next batch of this generation into its queue (or its outcome)."""
        outcome = self._outcome[i]
        if outcome == "end":
            self._exhausted[i] = True
            self._inflight[i].clear()
            return
        if isinstance(outcome, Failure):
            self._error = self._worker_exception(i, outcome)
            raise self._error
        self._ready_of(i)
        ref = self._inflight[i].popleft()
        self._request(i, None)  # keep the actor busy while this batch is consumed
        batch: Batch = self._wait(ref, i, "producing")
        del ref  # the batch leaves the object store once its elements are dropped
        if batch.generation != self._gen:
            return
        if batch.elements:
            self._wstate[i] = batch.state
            self._wskip[i] = 0
            self._queues[i].extend(batch.elements)
        if batch.end:
            self._outcome[i] = "end"
        elif batch.failure is not None:
            self._outcome[i] = batch.failure

    def _worker_exception(self, i: int, failure: Failure) -> BaseException:
        where = (
            f"raised in Ray worker actor {i} of {self._k} while producing output element "
            f"#{self._position}"
        )
        exc: Any = None
        if failure.pickled is not None:
            try:
                exc = pickle.loads(failure.pickled)
            except Exception:
                exc = None
        if isinstance(exc, BaseException):
            exc.add_note(f"{where}. Worker traceback:\n{failure.traceback}")
            return exc
        return RayWorkerError(
            f"{failure.type_name}: {failure.message} ({where}). Worker traceback:\n"
            f"{failure.traceback}"
        )

    # --- state --------------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        return gstate.make_state(
            STATE_KIND,
            num_workers=self._k,
            next_worker=self._next,
            position=self._position,
            workers=[
                {"state": self._wstate[i], "skip": self._wskip[i], "exhausted": self._exhausted[i]}
                for i in range(self._k)
            ],
        )

    def set_state(self, state: dict[str, Any]) -> None:
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        if isinstance(state, dict) and (
            state.get("kind") != STATE_KIND or state.get("num_workers") != self._k
        ):
            state = self._elastic_state(state)
        gstate.expect_state(
            state, STATE_KIND, ("num_workers", "next_worker", "workers"), num_workers=self._k
        )
        workers = state["workers"]
        nxt = state["next_worker"]
        if (
            not isinstance(workers, list)
            or len(workers) != self._k
            or not isinstance(nxt, int)
            or not 0 <= nxt < self._k
        ):
            raise gstate.StateMismatchError(
                f"The {STATE_KIND!r} state does not describe {self._k} workers: {state!r}"
            )
        for w in workers:
            skip = w.get("skip") if isinstance(w, dict) else None
            if not isinstance(skip, int) or skip < 0:
                raise gstate.StateMismatchError(f"Malformed worker entry in the state: {w!r}")
        for i, w in enumerate(workers):
            wstate = w.get("state")
            if wstate is None:
                continue
            template = self._template(i)
            if template is not None:
                gstate.check_same_pipeline(template, wstate, where=f"state.workers[{i}].state")
        self._gen += 1
        self._started = False
        self._error = None
        for i, w in enumerate(workers):
            self._queues[i].clear()
            self._inflight[i].clear()
            self._outcome[i] = None
            self._wstate[i] = w.get("state")
            self._wskip[i] = int(w["skip"])
            self._exhausted[i] = bool(w.get("exhausted", False))
        self._next = nxt
        self._position = int(state.get("position", 0))

    def _template(self, i: int) -> Any:
        """Worker ``i``'s fresh-iterator state; None if it could not build its pipeline (its
        error is raised at ``next()``)."""
        try:
            return self._ready_of(i).template
        except RayWorkerError:
            self._error = None  # reported again when its turn comes
            return None

    def _elastic_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """This iterator's state continuing where ``state`` (saved with another worker count, or
        in process) stopped; refuses with the reason."""
        saved = state.get("num_workers", 0) if state.get("kind") == STATE_KIND else 0
        what = (
            f"This state was saved with num_workers={saved} (0: in process) and is being restored "
            f"into a Ray runtime iterator with num_workers={self._k}"
        )
        if state.get("kind") != STATE_KIND:
            try:
                elastic.leaf_state(state)
            except gstate.StateMismatchError:
                gstate.expect_state(state, STATE_KIND)  # another pipeline: the usual message
                raise
        return elastic.restore_state(state, self._elastic_target(), what)

    def _elastic_target(self) -> elastic.ElasticTarget:
        templates = [self._template(i) for i in range(self._k)]
        problem = next(
            (self._ready[i].elastic_problem for i in range(self._k) if self._ready[i] is not None
             and self._ready[i].elastic_problem is not None),
            None,
        )
        if problem is None and any(t is None for t in templates):
            problem = "a worker could not build its pipeline (its error is raised at next())."
        leaves = [d for d in dataset_tree(self._parent_ds) if isinstance(d, PrefetchIterDataset)]
        if problem is None and len(leaves) != 1:
            problem = f"the pipeline before mp_prefetch has {len(leaves)} to_iter_dataset stages."
        k = self._k

        def build(g: int) -> dict[str, Any]:
            counts = elastic.split_prefix(g, k)
            return gstate.make_state(
                STATE_KIND,
                num_workers=k,
                next_worker=g % k,
                position=g,
                workers=[
                    {"state": elastic.state_at(templates[w], counts[w]), "skip": 0, "exhausted": False}
                    for w in range(k)
                ],
            )

        return elastic.ElasticTarget(
            problem=problem,
            map_ds=leaves[0].map_dataset if leaves else None,
            chain_template=templates[0],
            build=build,
            streams=k,
        )

    # --- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Kills the actors. Idempotent; safe from another thread."""
        self._closed = True
        self._finalizer()
