"""The runtime: threads, processes, devices and autotuning around the dataset kernel.

One module per job, each imported on first use:

* :mod:`~grain_core.runtime.multiprocess` — ``IterDataset.mp_prefetch`` (the dataset; runtime
  selection).
* :mod:`~grain_core.runtime.api` — the runtime API's public import point (re-exports only) for:
  :mod:`~grain_core.runtime.messages` (typed messages), :mod:`~grain_core.runtime.job` (the
  worker job), :mod:`~grain_core.runtime.transport` (the protocols a runtime implements,
  ``register_runtimes`` hook), :mod:`~grain_core.runtime.worker` (the worker loop) and
  :mod:`~grain_core.runtime.consumer` (the round-robin consumer).
* :mod:`~grain_core.runtime.processes` — the process runtime, consumer side (worker processes,
  pipes); :mod:`~grain_core.runtime.process_worker` — its worker-process side and wire records.
* :mod:`~grain_core.runtime.shm` — moving elements between processes through shared memory.
* :mod:`~grain_core.runtime.thread_prefetch` — ``ThreadPrefetchIterDataset`` (a background thread).
* :mod:`~grain_core.runtime.read_ahead` — ``ReadAhead``, the one thread read-ahead (thread prefetch
  and the interleave plugin use it; public through ``grain_core.author``).
* :mod:`~grain_core.runtime.device` — ``device_put`` (elements to JAX devices; jax imported lazily).
* :mod:`~grain_core.runtime.autotune` — ``pick_performance_config``.
* :mod:`~grain_core.runtime.elastic` — the old name of :mod:`grain_core.dataset.elastic` (elastic
  restore: what a state means for another worker or process count).

See ``docs/runtime.md``.
"""

from grain_core.runtime import elastic  # noqa: F401 -- keeps grain_core.runtime.elastic an attribute
