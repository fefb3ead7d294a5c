"""``RayRuntime``: the ``mp_prefetch`` runtime running worker shares as Ray Core actors.

``ds.mp_prefetch(options, runtime=RayRuntime(...))`` (or ``runtime="ray"`` for the defaults) starts
``options.num_workers`` actors (:class:`grain_plugin_ray.actor.WorkerActor`); the kernel's
round-robin consumer reads them, so elements, order and state are ``mp_prefetch``'s.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
import uuid
from collections.abc import Mapping
from typing import Any

from grain_core.author import AHEAD_BYTES, WorkerJob
from grain_plugin_ray.actor import WorkerActor
from grain_plugin_ray.pipe_path import available as pipe_available
from grain_plugin_ray.pipe_path import new_token
from grain_plugin_ray.pool import RayWorkerPool
from grain_plugin_ray.shm_path import remember_prefix, usable

__all__ = ["ACTOR_NAMESPACE", "DEFAULT_AHEAD_BYTES", "RayRuntime"]

#: The Ray namespace of the worker actors (``ray.util.list_named_actors(all_namespaces=True)``).
ACTOR_NAMESPACE = "grain_core"

#: ``RayRuntime.ahead_bytes`` by default: bytes of finished elements an actor may hold ahead of
#: ``next()`` beyond ``per_worker_buffer_size``, so that one actor call carries a group of elements
#: (with 16 MiB, 256 KiB elements ran about 15% slower on one host: docs/ray.md).
DEFAULT_AHEAD_BYTES = 32 << 20


def _positive(name: str, value: Any, kind: type | tuple[type, ...] = int) -> None:
    if isinstance(value, bool) or not isinstance(value, kind) or not typing.cast(float, value) > 0:
        raise ValueError(f"RayRuntime.{name} must be a positive number, got {value!r}.")


@dataclasses.dataclass(frozen=True)
class RayRuntime:
    """Runs each ``mp_prefetch`` worker share in a Ray actor instead of a local process.

    Attributes:
      address: the Ray cluster to connect to when this process is not connected yet
        (``ray.init(address=...)``: ``"auto"``, ``"ray://host:10001"``, ``"host:6379"``; None:
        ``RAY_ADDRESS`` or a new local instance). When ``ray.is_initialized()`` already, the current
        connection is used whatever ``address`` says.
      init_kwargs: further ``ray.init`` arguments, used only when this runtime calls ``ray.init``
        (e.g. ``{"num_cpus": 2}`` for a local instance).
      num_cpus: CPUs each actor reserves (Ray's ``num_cpus``; fractions allowed). A pool of
        ``num_workers`` actors needs ``num_workers * num_cpus`` free CPUs.
      resources: custom resources each actor reserves, e.g. ``{"preprocessing": 1}`` to place the
        actors only on nodes started with ``ray start --resources '{"preprocessing": 8}'``.
      runtime_env: Ray runtime environment of the actors (``working_dir``, ``pip``, ``env_vars``).
      start_timeout_s: how long an actor may take to be placed by Ray and to build its pipeline
        before the iterator raises; a cluster without the requested CPUs or resources never
        places it.
      min_buffer_size: None (default): each actor holds at most ``per_worker_buffer_size``
        elements produced and not yet returned by ``next()``, exactly as a worker process (plus
        the one in production, and small elements up to ``AHEAD_BYTES``). A number: each actor
        may hold ``max(per_worker_buffer_size, min_buffer_size)``, so that one actor call carries
        a group of elements even when ``per_worker_buffer_size`` is small and the elements are
        large (Grain's default 1 then costs an actor round trip per element). Elements, order and
        state do not change; only how far the actors run ahead (memory) does.
      ahead_bytes: how far an actor may run ahead in bytes (default :data:`DEFAULT_AHEAD_BYTES`,
        32 MiB; at least the kernel's ``AHEAD_BYTES``, 4 MiB): beyond ``per_worker_buffer_size``,
        an actor starts another element while the elements it holds ahead of ``next()`` take
        under this many bytes (the worker loop's byte allowance, which worker processes have at
        4 MiB), and the consumer's credits ride on its fetch calls. So at Grain's default buffer of 1
        one actor call carries a group of elements of any size under it, where each element
        would otherwise cost a round trip; an actor's ``fetch`` holds what it could return until
        it makes a group of 3/8 of this many bytes or 64 elements, or the actor cannot go on
        (see :mod:`grain_plugin_ray.actor`). Elements, order and state do not change; only how
        far the actors run ahead (memory in Ray's object store) does.
      max_restarts: 0 (default): a dead actor ends the iteration with ``WorkerError`` (restore
        the last checkpoint to continue). ``n > 0``: the iterator replaces a dead actor up to
        ``n`` times per worker; the new actor restarts from the state of the last elements
        received from the old one, so the output stays exactly the same.
      shared_memory: True (default): an actor that runs on this process's own Ray node sends the
        large buffers of its groups through POSIX shared memory, as ``mp_prefetch``'s worker
        processes do, instead of Ray's object store (see :mod:`grain_plugin_ray.shm_path`): the
        elements arrive as fresh, writable arrays. Actors on other nodes, and groups when
        ``/dev/shm`` lacks room, use the object store. False: always the object store.
      pipes: True (default): with ``shared_memory``, an actor on this process's own Ray node (on
        Linux, with ``max_restarts=0``) sends its elements and receives its commands over
        ``mp_prefetch``'s pipe transport instead of actor calls (see
        :mod:`grain_plugin_ray.pipe_path`): no actor call per group, credits as soon as ``next()``
        hands elements out. Elements, order and state do not change. False: actor calls.

    As with processes, each worker holds at most ``per_worker_buffer_size`` elements produced and
    not yet returned by ``next()`` (plus the one it produces meanwhile; see ``min_buffer_size``).
    Elements travel in groups (one actor call returns every group ready); numpy leaves of large
    results arrive as read-only zero-copy views of Ray's object store.
    """

    address: str | None = None
    init_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_cpus: float = 1.0
    resources: Mapping[str, float] = dataclasses.field(default_factory=dict)
    runtime_env: Mapping[str, Any] | None = None
    start_timeout_s: float = 120.0
    min_buffer_size: int | None = None
    max_restarts: int = 0
    ahead_bytes: int = DEFAULT_AHEAD_BYTES
    shared_memory: bool = True
    pipes: bool = True

    def __post_init__(self) -> None:
        if self.address is not None and not isinstance(self.address, str):
            raise TypeError(f"RayRuntime.address must be a str or None, got {self.address!r}.")
        if not isinstance(self.init_kwargs, Mapping):
            raise TypeError(f"RayRuntime.init_kwargs must be a mapping, got {self.init_kwargs!r}.")
        if (
            isinstance(self.num_cpus, bool)
            or not isinstance(self.num_cpus, int | float)
            or not math.isfinite(self.num_cpus)
            or self.num_cpus < 0
        ):
            raise ValueError(f"RayRuntime.num_cpus must be a number >= 0, got {self.num_cpus!r}.")
        if not isinstance(self.resources, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and v > 0
            for k, v in self.resources.items()
        ):
            raise ValueError(
                "RayRuntime.resources must map resource names to positive amounts, got "
                f"{self.resources!r}."
            )
        if self.runtime_env is not None and not isinstance(self.runtime_env, Mapping):
            raise TypeError(f"RayRuntime.runtime_env must be a mapping, got {self.runtime_env!r}.")
        _positive("start_timeout_s", self.start_timeout_s, (int, float))
        if self.min_buffer_size is not None:
            _positive("min_buffer_size", self.min_buffer_size)
        if (
            isinstance(self.ahead_bytes, bool)
            or not isinstance(self.ahead_bytes, int)
            or self.ahead_bytes < AHEAD_BYTES
        ):
            raise ValueError(
                f"RayRuntime.ahead_bytes must be an int >= {AHEAD_BYTES} (the worker loop's own "
                f"allowance, grain_core.author.AHEAD_BYTES), got {self.ahead_bytes!r}."
            )
        for flag in ("shared_memory", "pipes"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(
                    f"RayRuntime.{flag} must be True or False, got {getattr(self, flag)!r}."
                )
        if (
            isinstance(self.max_restarts, bool)
            or not isinstance(self.max_restarts, int)
            or self.max_restarts < 0
        ):
            raise ValueError(
                f"RayRuntime.max_restarts must be an int >= 0, got {self.max_restarts!r}."
            )

    def actor_job(self, job: WorkerJob) -> WorkerJob:
        """The job the actors run: ``job`` with its buffer raised to ``min_buffer_size``."""
        if self.min_buffer_size is None or job.buffer_size >= self.min_buffer_size:
            return job
        return dataclasses.replace(job, buffer_size=self.min_buffer_size)

    def connect(self) -> None:
        """Connects this process to Ray (``ray.init``) unless it is connected already."""
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, **dict(self.init_kwargs))

    def actor_options(self, name: str, namespace: str) -> dict[str, Any]:
        """``ray.remote(...).options`` for one worker actor."""
        opts: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "name": name,
            "namespace": namespace,
            "max_restarts": 0,
            # fetch waits for output while post delivers commands: a threaded actor.
            "max_concurrency": 4,
        }
        if self.resources:
            opts["resources"] = dict(self.resources)
        if self.runtime_env is not None:
            opts["runtime_env"] = dict(self.runtime_env)
        return opts

    def start_workers(self, job: WorkerJob) -> RayWorkerPool:
        """Starts ``job.worker_count`` actors, worker ``i`` running ``WorkerLoop(job, i, ...)``."""
        import ray

        self.connect()
        actor_job = self.actor_job(job)
        job_ref = ray.put(actor_job)
        actor_class = ray.remote(WorkerActor)
        tag = uuid.uuid4().hex[:12]
        names = [f"grain_core-{tag}-w{i}" for i in range(job.worker_count)]
        # The one-host path: actors on this node write their groups into shared memory, under a
        # prefix per actor (swept by the pool once the actor is gone).
        prefixes: dict[str, str] | None = None
        node = None
        if self.shared_memory and usable():
            from grain_core.author import new_shm_prefix, reclaim_stale_shm

            prefixes = {}
            node = ray.get_runtime_context().get_node_id()

        # The pipe path: a token per first actor (replacements, with max_restarts, use calls).
        tokens = None
        if prefixes is not None and self.pipes and self.max_restarts == 0 and pipe_available():
            tokens = [new_token() for _ in names]
        if prefixes is not None and tokens is None:
            reclaim_stale_shm()  # what consumers killed outright left (on the pipe path: PipePool)

        def spawn(i: int, name: str) -> Any:
            opts = self.actor_options(name, ACTOR_NAMESPACE)
            prefix = None
            if prefixes is not None:
                prefix = new_shm_prefix()
                remember_prefix(prefix)
            pipe = (tokens[i], os.getpid()) if tokens is not None else (None, None)
            actor = actor_class.options(**opts).remote(
                job_ref, i, self.ahead_bytes, prefix, node, *pipe
            )
            if prefixes is not None and prefix is not None:
                prefixes[name] = prefix
            return actor

        actors: list[Any] = []
        try:
            for i, name in enumerate(names):
                actors.append(spawn(i, name))
        except BaseException:
            for a in actors:
                ray.kill(a, no_restart=True)
            raise
        return RayWorkerPool(
            self,
            actors,
            names,
            actor_job.buffer_size,
            spawn,
            ahead_bytes=self.ahead_bytes,
            shm_prefixes=prefixes,
            pipe_tokens=tokens,
        )
