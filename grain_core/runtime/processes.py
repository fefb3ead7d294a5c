"""The built-in transport of :mod:`grain_core.runtime.api`: worker processes and shared memory.

This module starts the worker processes (:class:`ProcessPool`, :class:`ProcessRuntime`); the
consumer's side of their pipes (channels, the I/O thread) is :mod:`grain_core.runtime.pipe_pool`,
the worker process's side and the wire records are in :mod:`grain_core.runtime.process_worker`.

Contract (see ``docs/runtime.md`` and ``docs/reliability.md``):

* Workers are ``forkserver`` processes where the platform has it, else ``spawn`` (Windows);
  ``GRAIN_CORE_MP_START_METHOD=spawn`` or ``ProcessRuntime(start_method="spawn")`` picks ``spawn``
  anywhere (see :func:`default_start_method`); never ``fork``. Each runs :class:`~grain_core.runtime.worker.WorkerLoop` after
  :meth:`WorkerEnvironment.apply <grain_core.runtime.job.WorkerEnvironment.apply>`. Helper
  interpreters start with ``PYTHONSAFEPATH=1``, so the working directory is never on their path
  before the consumer's ``sys.path`` (which has it only if the consumer had it) is applied.
* One pipe per worker carries the typed messages. :class:`~grain_core.runtime.messages.Consumed` counts
  (the flow-control credits) and the numbers of the messages the consumer is done with take a
  second, one-way channel per worker instead (a socket pair, :mod:`grain_core.runtime.credits`), as fixed 16-byte
  :class:`~grain_core.runtime.credits.CreditRecord` s: the consumer's own thread writes a credit the
  moment ``next()`` hands an element out, with no hop through its I/O thread, never blocking, and
  the worker always reads whole records in order. :class:`~grain_core.runtime.messages.Elements` travel
  as one pickle of the element list per message (not one per element), with their numpy buffers
  in pooled shared-memory segments (:mod:`grain_core.runtime.shm`); the
  consumer's I/O thread reads each message as it arrives, lending its arrays (views of the
  segment, given back when they are gone) or copying them out (small messages, or past the
  lending allowance), and the worker reuses the segment once it hears the message is done. When ``/dev/shm`` has too little room (:func:`grain_core.runtime.shm.shm_min_free_bytes`)
  elements are pickled through the pipe instead, with a warning saying how to enlarge ``/dev/shm``.
* Nothing outlives the job: the consumer unlinks a segment's name as soon as it has opened it (both
  sides then hold it; the memory goes when both are gone); segment names carry the consumer's pid
  and starting a pool unlinks those of dead consumers (:func:`grain_core.runtime.shm.reclaim_stale_shm`).
  Workers die with their consumer: a parent-death signal (Linux ``prctl``) and a watchdog thread
  that checks the consumer's pid. ``close()``, garbage collection and interpreter exit stop them.
* Every wait on a pipe, socket or worker sentinel goes through :mod:`grain_core.runtime.waiting`
  (portable, and always with a timeout); the in-process wake-ups are socket pairs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from grain_core.runtime import shm
from grain_core.runtime.credits import credit_channel
from grain_core.runtime.job import WorkerJob
from grain_core.runtime.pipe_pool import PipePool
from grain_core.runtime.process_worker import SYS_PATH_ENV, Boot, PayloadFile, worker_main

__all__ = ["ProcessPool", "ProcessRuntime", "START_METHOD_ENV", "default_start_method"]

START_METHOD_ENV = "GRAIN_CORE_MP_START_METHOD"
_PRELOAD = ("grain_core._forkserver_preload",)
_forkserver_lock = threading.Lock()


def default_start_method() -> str:
    """The start method used when none is given: ``GRAIN_CORE_MP_START_METHOD`` if set, else
    ``"forkserver"`` where the platform has it (Linux, macOS), else ``"spawn"`` (Windows)."""
    method = os.environ.get(START_METHOD_ENV, "")
    if method:
        if method not in ("forkserver", "spawn"):
            raise ValueError(
                f"{START_METHOD_ENV} must be 'forkserver' or 'spawn', got {method!r}: unset it or "
                "pick one of the two ('fork' is never used: it copies the parent's threads' locks)."
            )
        return method
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


# --------------------------------------------------------------------------------------------------
# consumer side
# --------------------------------------------------------------------------------------------------


class _ProcessWorker:
    """A worker process, as its :class:`~grain_core.runtime.pipe_pool.PipePool` sees it."""

    def __init__(self, proc: Any):
        self.proc = proc

    @property
    def sentinel(self) -> Any:
        return self.proc.sentinel

    def loss(self) -> str:
        proc = self.proc
        try:
            proc.join(1.0)
            code = proc.exitcode
        except Exception:
            code = None
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"signal {-code}"
        # Grain's wording ("was terminated unexpectedly with exit code N"), which clients match.
        return f"(pid {proc.pid}) was terminated unexpectedly with {how}"

    def stop(self, deadline: float) -> None:
        p = self.proc
        try:
            p.join(max(0.0, deadline - time.monotonic()))
        except Exception:
            pass
        try:
            if p.is_alive():
                p.terminate()
                p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join(1.0)
            p.close()
        except Exception:
            pass


class ProcessPool(PipePool):
    """Worker processes attached to a :class:`~grain_core.runtime.pipe_pool.PipePool` (their pipes,
    credit channels and the consumer's I/O thread); see the module docstring."""

    def __init__(self, runtime: ProcessRuntime, job: WorkerJob):
        super().__init__(use_shm=True)
        self.prefix = shm.new_shm_prefix()
        ctx = runtime.context()
        payload_file = None
        if PayloadFile.AVAILABLE and len(job.payload) >= PayloadFile.MIN_BYTES:
            try:
                payload_file = PayloadFile.create(job.payload)
            except OSError:  # no memfd here (a sandbox, no memory): through the pipe as before
                pass
            else:
                job = dataclasses.replace(job, payload=b"")
        try:
            for i in range(job.worker_count):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                credit_r, credit_w = credit_channel()
                try:
                    boot = Boot(
                        child_conn,
                        credit_r,
                        i,
                        job,
                        f"{self.prefix}w{i}",
                        os.getpid(),
                        self.use_shm,
                        self.min_free,
                        payload_file,
                    )
                    proc = ctx.Process(
                        target=worker_main,
                        args=(boot,),
                        name=f"grain_core-mp-worker-{i}",
                        daemon=True,
                    )
                    with _worker_start():
                        proc.start()
                except BaseException:
                    for c in (parent_conn, credit_w):
                        c.close()
                    raise
                finally:
                    child_conn.close()  # the worker has its own copies now (or never will)
                    credit_r.close()
                self.attach(_ProcessWorker(proc), parent_conn, credit_w)
        except BaseException:
            self.close()
            raise
        finally:
            if payload_file is not None:
                payload_file.close()  # the started workers hold their own descriptors

    @property
    def worker_pids(self) -> list[int]:
        return [c.worker.proc.pid for c in self.channels]  # type: ignore[attr-defined]

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        shm.sweep_shm(self.prefix)


# --------------------------------------------------------------------------------------------------
# the runtime
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProcessRuntime:
    """Workers in local processes, elements through shared memory (the default runtime, registered
    as ``"processes"``). ``start_method``: ``"forkserver"`` or ``"spawn"``; None:
    :func:`default_start_method` (``GRAIN_CORE_MP_START_METHOD``, else forkserver where it exists,
    else spawn)."""

    start_method: str | None = None

    def __post_init__(self) -> None:
        if self.start_method not in (None, "forkserver", "spawn"):
            raise ValueError(
                f"ProcessRuntime(start_method=...) must be 'forkserver' or 'spawn', got "
                f"{self.start_method!r} ('fork' is never used: it copies the parent's threads' "
                "locks)."
            )

    def context(self) -> Any:
        method = self.start_method or default_start_method()
        if method not in mp.get_all_start_methods():
            raise ValueError(
                f"start method {method!r} does not exist on this platform ({sys.platform}); use "
                "'spawn' (ProcessRuntime(start_method='spawn') or GRAIN_CORE_MP_START_METHOD=spawn)."
            )
        ctx = mp.get_context(method)
        if method == "forkserver":
            from multiprocessing import forkserver

            with _forkserver_lock:
                server = forkserver._forkserver  # type: ignore[attr-defined]
                if getattr(server, "_forkserver_pid", None) is None:
                    mods = [m for m in getattr(server, "_preload_modules", []) if m != "__main__"]
                    mods += [m for m in _PRELOAD if m not in mods]
                    ctx.set_forkserver_preload(mods)
        return ctx

    def start_workers(self, job: WorkerJob) -> ProcessPool:
        return ProcessPool(self, job)


@contextlib.contextmanager
def _worker_start() -> Iterator[None]:
    """While a worker (and, the first time, the forkserver) starts: ``__main__``'s file and spec
    hidden, so multiprocessing does not re-run the user's script (or ``<stdin>``) in it (workers
    never need ``__main__``: cloudpickle sends its functions by value), and ``PYTHONSAFEPATH=1`` plus
    this ``sys.path`` in the environment, so the new interpreter never imports from the working
    directory unless this process's path has it."""
    import json

    main = sys.modules.get("__main__")
    missing = object()
    with _forkserver_lock:
        saved_env = {k: os.environ.get(k) for k in ("PYTHONSAFEPATH", SYS_PATH_ENV)}
        os.environ["PYTHONSAFEPATH"] = "1"
        os.environ[SYS_PATH_ENV] = json.dumps(
            {"sys_path": sys.path, "safe_path": saved_env["PYTHONSAFEPATH"]}
        )
        saved = {}
        if main is not None:
            saved = {k: main.__dict__.get(k, missing) for k in ("__file__", "__spec__")}
            main.__dict__.pop("__file__", None)
            main.__spec__ = None
        try:
            yield
        finally:
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if main is not None:
                for k, v in saved.items():
                    if v is missing:
                        main.__dict__.pop(k, None)
                    else:
                        main.__dict__[k] = v
