"""The actor side: one Ray actor runs worker ``index`` of ``count``'s share of a pipeline.

The actor is a plain class (:class:`ShareWorker`) that the consumer turns into a Ray actor with
``ray.remote``; its methods run one at a time, in the order the consumer called them:

* ``ShareWorker(payload, index, count, environment)`` applies the consumer's
  :class:`~grain_plugin_ray.messages.WorkerEnvironment`, unpickles ``(pipeline, worker_init_fn)``,
  runs ``worker_init_fn(index, count)`` and builds the iterator inside
  :func:`grain_core.dataset.sharing.worker_share` — exactly what an ``mp_prefetch`` worker process
  does, so the actor produces the same elements with the same states.
* ``ready()`` returns a :class:`~grain_plugin_ray.messages.Ready` (fresh state, or why it failed).
* ``produce(request)`` returns a :class:`~grain_plugin_ray.messages.Batch` of up to
  ``request.max_elements`` elements with the state before the first; the first request of a
  generation moves the iterator to ``request.start`` first. Exceptions travel inside the batch.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
import traceback
from typing import Any

import numpy as np

from grain_core.dataset.sharing import worker_share
from grain_core.plugins.registry import get_registry, reimport_explicit
from grain_core.runtime.elastic import chain_problem
from grain_core.tree import flatten_with_paths
from grain_plugin_ray.messages import Batch, Failure, Ready, Request, WorkerEnvironment

ENV_PREFIX = "GRAIN_CORE_"


def failure_of(e: BaseException) -> Failure:
    """``e`` as a message: pickled when it comes back out of pickle as an exception."""
    import cloudpickle

    data: bytes | None
    try:
        data = cloudpickle.dumps(e)
        if not isinstance(pickle.loads(data), BaseException):
            data = None
    except Exception:
        data = None
    return Failure(data, type(e).__name__, str(e), traceback.format_exc())


def apply_environment(environment: WorkerEnvironment) -> None:
    """Makes this process see the consumer's ``sys.path``, ``GRAIN_CORE_*`` variables and
    explicitly registered plugins."""
    sys.path[:] = list(environment.sys_path) + [
        p for p in sys.path if p not in environment.sys_path
    ]
    mine = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    if mine != environment.env:
        for k in mine:
            os.environ.pop(k, None)
        os.environ.update(environment.env)
        get_registry().reload()
    reimport_explicit(environment.plugin_modules)


def numpy_bytes(element: Any) -> int:
    """Bytes held by the numpy arrays of ``element``."""
    return sum(leaf.nbytes for _, leaf in flatten_with_paths(element) if isinstance(leaf, np.ndarray))


class ShareWorker:
    """Worker ``index`` of ``count``: see the module docstring."""

    def __init__(self, payload: bytes, index: int, count: int, environment: WorkerEnvironment):
        import cloudpickle

        self.index, self.count = index, count
        self.iterator: Any = None
        self.template: Any = None
        self.elastic_problem: str | None = None
        self.setup_failure: Failure | None = None
        self.generation = -1
        self.fresh = True  # nothing read yet: the fresh state needs no set_state
        self.failed: Failure | None = None  # the current generation's restart failed
        try:
            apply_environment(environment)
            pipeline, init_fn = cloudpickle.loads(payload)
            if init_fn is not None:
                init_fn(index, count)
            self._build(pipeline)
        except Exception as e:
            self.setup_failure = failure_of(e)

    def _build(self, pipeline: Any) -> None:
        with worker_share(self.index, self.count) as share:
            it = iter(pipeline)
        if not share.claimed and self.count > 1:
            it.close()
            raise ValueError(
                f"Ray runtime with {self.count} workers: no stage of this pipeline can read a share "
                "of its input, so every worker would produce every element. Put a "
                "MapDataset.to_iter_dataset() (or a plugin stage that splits its input, such as "
                "InterleaveIterDataset) upstream of mp_prefetch."
            )
        self.iterator = it
        self.template = it.get_state()
        try:
            self.elastic_problem = chain_problem(it)
        except Exception as e:  # never fail a worker over the elastic analysis
            self.elastic_problem = f"it could not be analysed ({type(e).__name__}: {e})."

    def ready(self) -> Ready:
        import ray

        return Ready(
            index=self.index,
            template=None if self.setup_failure is not None else self.template,
            elastic_problem=self.elastic_problem,
            failure=self.setup_failure,
            node_id=ray.get_runtime_context().get_node_id(),
            pid=os.getpid(),
        )

    def produce(self, request: Request) -> Batch:
        gen = request.generation
        if self.setup_failure is not None:
            return Batch(gen, None, [], failure=self.setup_failure)
        if request.start is not None and gen != self.generation:
            self.generation, self.failed = gen, None
            try:
                self._restart(request.start.state, request.start.skip)
            except Exception as e:
                self.failed = failure_of(e)
        if self.failed is not None:
            return Batch(gen, None, [], failure=self.failed)
        it = self.iterator
        self.fresh = False
        state = it.get_state()
        elements: list[Any] = []
        nbytes = 0
        t0 = time.perf_counter()
        while len(elements) < request.max_elements:
            try:
                x = next(it)
            except StopIteration:
                return Batch(gen, state, elements, end=True)
            except Exception as e:
                self.failed = failure_of(e)
                return Batch(gen, state, elements, failure=self.failed)
            elements.append(x)
            nbytes += numpy_bytes(x)
            if nbytes >= request.max_bytes or time.perf_counter() - t0 >= request.max_seconds:
                break
        return Batch(gen, state, elements)

    def _restart(self, state: Any, skip: int) -> None:
        if self.fresh and state is None and skip == 0:
            return
        self.fresh = False
        self.iterator.set_state(self.template if state is None else state)
        for _ in range(skip):
            next(self.iterator)

    def close(self) -> None:
        """Closes the iterator (threads, files) before the actor is killed."""
        if self.iterator is not None:
            self.iterator.close()
