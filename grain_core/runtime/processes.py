"""The built-in transport of :mod:`grain_core.runtime.api`: worker processes and shared memory.

This module is the consumer's side (the pool, its channels and I/O thread, :class:`ProcessRuntime`);
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

import collections
import contextlib
import dataclasses
import functools
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

from grain_core.runtime import shm
from grain_core.runtime.credits import CreditRecord, CreditSender, credit_channel
from grain_core.runtime.job import WorkerJob
from grain_core.runtime.messages import Consumed, Elements, Failure, Stop, pickle_exception
from grain_core.runtime.process_worker import (
    SYS_PATH_ENV,
    Boot,
    PayloadFile,
    ShmElements,
    worker_main,
)
from grain_core.runtime.transport import WorkerLostError
from grain_core.runtime.waiting import Poller

__all__ = ["ProcessPool", "ProcessRuntime", "START_METHOD_ENV", "default_start_method"]

START_METHOD_ENV = "GRAIN_CORE_MP_START_METHOD"
_PRELOAD = ("grain_core._forkserver_preload",)
_STOP_GRACE_SECONDS = 0.5
_forkserver_lock = threading.Lock()


def _released_records(numbers: list[int]) -> bytes:
    return b"".join(CreditRecord(CreditRecord.RELEASED, n).pack() for n in numbers)


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


class _ProcessChannel:
    """The consumer's end of one worker: an inbox filled by the pool's I/O thread, an outbox the
    I/O thread sends from, and the credit channel. A ``Consumed`` count is written to the credit
    channel by the calling thread itself (never blocking); only when the channel is full (the
    worker has not read for thousands of records) is it left to the I/O thread, which retries the
    latest count until it fits."""

    def __init__(self, pool: ProcessPool, proc: Any, conn: Any, credits: CreditSender):
        self._pool = pool
        self.proc = proc
        self.conn = conn
        self.credits = credits  # the consumer's end of the credit channel
        self.inbox: collections.deque[Any] = collections.deque()
        self.outbox: collections.deque[Any] = collections.deque()
        self.unsent_credit: Consumed | None = None  # left to the I/O thread (pipe was full)
        # Numbers of the worker's messages the consumer is done with, not yet sent: appended when
        # a message is copied out, or by a lent message's finalizer (any thread), see shm.
        self.released: collections.deque[int] = collections.deque()
        self.lost: str | None = None  # how the worker was lost

    def send(self, message: Any) -> None:
        if isinstance(message, Consumed):
            # Any older unsent count is superseded: counts are absolute.
            self.unsent_credit = None
            numbers = self._take_released()
            data = CreditRecord(message.generation, message.elements).pack()
            if self.credits.write(data + _released_records(numbers)):
                if self.credits.pending:  # part of it is left for the I/O thread to send
                    self._pool.wake()
            else:
                self.released.extendleft(reversed(numbers))
                self.unsent_credit = message
                self._pool.wake()
            return
        self.outbox.append(message)
        self._pool.wake()

    def _take_released(self) -> list[int]:
        released = self.released
        numbers = []
        while released:
            numbers.append(released.popleft())
        return numbers

    def send_released(self) -> None:
        """Sends the numbers of the messages the consumer is done with (those that do not fit the
        channel stay queued)."""
        numbers = self._take_released()
        if numbers and not self.credits.write(_released_records(numbers)):
            self.released.extendleft(reversed(numbers))

    def write_record(self, record: CreditRecord) -> bool:
        """Writes one record to the credit channel; False when it is full (nothing written)."""
        return self.credits.write(record.pack())

    def peek(self, timeout: float) -> Any:
        # No lock is taken here: an exception raised into the caller (Ctrl-C) at any point leaves
        # nothing held and nothing removed.
        if self.inbox:
            return self.inbox[0]
        if self.lost is None:
            self._pool.wait_ready(self, timeout)
        if self.inbox:
            return self.inbox[0]
        if self.lost is not None:
            raise WorkerLostError(self.lost)
        return None

    def drop(self) -> None:
        if self.inbox:
            self.inbox.popleft()


class ProcessPool:
    """Worker processes, their pipes and the consumer's I/O thread; see the module docstring."""

    def __init__(self, runtime: ProcessRuntime, job: WorkerJob):
        self.prefix = shm.new_shm_prefix()
        self.channels: list[_ProcessChannel] = []
        self._reader = shm.MessageReader()  # lends once /dev/shm's room is known, below
        self._closed = False
        self._close_lock = threading.Lock()
        # Wake-up channels inside this process: socket pairs, waitable on every platform
        # (grain_core.runtime.waiting); never blocking.
        self._wake_r, self._wake_w = socket.socketpair()  # consumer -> I/O thread: to send
        self._wake_w.setblocking(False)
        self._wake_r.setblocking(False)
        self._wake_pending = False
        self._ready_r, self._ready_w = socket.socketpair()  # I/O thread -> consumer: arrived
        self._waiting_for: _ProcessChannel | None = None  # the channel the consumer waits for
        self._ready_r.setblocking(False)
        self._ready_w.setblocking(False)
        self._ready_poller = Poller()  # the consumer's thread waits on it (wait_ready)
        self._ready_poller.register(self._ready_r)
        self._warned = False
        use_shm = shm.SHM_AVAILABLE  # no POSIX shared memory (Windows): pickled through the pipes
        if use_shm:
            shm.reclaim_stale_shm()
        min_free = shm.shm_min_free_bytes()
        free = shm.free_bytes() if use_shm else None
        if free is not None and free < 2 * min_free:
            use_shm = False
            self._warn(
                f"/dev/shm has only {free >> 20} MiB free (at least {(2 * min_free) >> 20} MiB "
                f"wanted, see {shm.MIN_FREE_ENV})"
            )
        if use_shm:
            self._reader.lend_bytes = shm.lend_allowance()
        ctx = runtime.context()
        self._thread: threading.Thread | None = None
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
                        use_shm,
                        min_free,
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
                self.channels.append(_ProcessChannel(self, proc, parent_conn, credit_w))
            self._thread = threading.Thread(
                target=self._io_loop, name="grain_core-mp-io", daemon=True
            )
            self._thread.start()
        except BaseException:
            self.close()
            raise
        finally:
            if payload_file is not None:
                payload_file.close()  # the started workers hold their own descriptors

    @property
    def worker_pids(self) -> list[int]:
        return [c.proc.pid for c in self.channels]

    def _warn(self, why: str) -> None:
        if self._warned:
            return
        self._warned = True
        warnings.warn(
            f"mp_prefetch: {why}; elements are sent pickled through pipes instead of shared "
            "memory (slower). Enlarge /dev/shm: `docker run --shm-size=2g ...` (Docker's default is "
            "64 MiB), or `mount -o remount,size=2G /dev/shm` as root.",
            RuntimeWarning,
            stacklevel=4,
        )

    def wake(self) -> None:
        if self._wake_pending:
            return  # the I/O thread has not read the last wake-up yet: it will see this too
        self._wake_pending = True
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (BlockingIOError) or closed
            pass

    def _signal_ready(self, ch: _ProcessChannel | None = None) -> None:
        """Wakes the consumer: always without ``ch`` (a worker lost, closing); with ``ch`` (a
        message arrived for it) only while the consumer waits for that channel: it looks at its
        inbox before it waits (see wait_ready), and a message for another worker would wake it
        for nothing (it waits for the worker whose turn it is)."""
        if ch is not None and self._waiting_for is not ch:
            return
        try:
            self._ready_w.send(b"\0")
        except OSError:  # full (BlockingIOError) or closed
            pass

    def wait_ready(self, ch: _ProcessChannel, timeout: float) -> None:
        """Waits up to ``timeout`` for the I/O thread to deliver a message to ``ch`` (or to lose a
        worker), unless ``ch`` has one. ``_waiting_for`` is set before ``ch`` is looked at and the
        I/O thread appends before it reads it, so a message is either seen here or signalled."""
        self._waiting_for = ch
        try:
            if ch.inbox or ch.lost is not None:
                return
            if self._ready_poller.wait(timeout):
                self._ready_r.recv(65536)
        except (BlockingIOError, OSError, ValueError):
            pass
        finally:
            self._waiting_for = None

    # --- the I/O thread ----------------------------------------------------------------------------

    def _io_loop(self) -> None:
        # One poller for the thread's life (grain_core.runtime.waiting: a selector built per wait
        # cost more than the read it waited for); a lost worker's pipe and sentinel are removed.
        poller = Poller()
        wake = poller.register(self._wake_r)
        by_fd: dict[int, tuple[bool, _ProcessChannel]] = {}  # fd -> (is the pipe, channel)
        for c in self.channels:
            for obj, is_pipe in ((c.conn, True), (c.proc.sentinel, False)):
                by_fd[poller.register(obj)] = (is_pipe, c)
        while not self._closed:
            self._flush()
            for fd, (_, c) in list(by_fd.items()):
                if c.lost is not None:
                    poller.unregister(fd)
                    del by_fd[fd]
            try:
                ready = poller.wait(0.2)
            except OSError:
                if self._closed:
                    return
                raise
            if self._closed:
                return
            for fd in ready:
                if fd == wake:
                    try:
                        self._wake_r.recv(4096)
                    except OSError:
                        pass
                    # After draining, before flushing: a wake() that still saw the flag set
                    # stored its message before looking, so this flush sends it; a later wake()
                    # writes again. (Clearing the flag before the read lost wake-ups: a byte
                    # written in between was drained while the flag stayed set, and every
                    # wake() after it was skipped until another event woke this thread.)
                    self._wake_pending = False
                    self._flush()
                    continue
                is_pipe, ch = by_fd.get(fd, (False, None))
                if ch is None or ch.lost is not None:
                    continue
                if is_pipe:
                    self._read(ch)
                elif not self._drain(ch):
                    self._lose(ch)

    def _flush(self) -> None:
        for ch in self.channels:
            if ch.lost is not None:
                continue
            try:
                while ch.outbox:
                    ch.conn.send(ch.outbox.popleft())
            except (OSError, EOFError):
                pass  # the worker is gone: its sentinel says so
            ch.credits.flush()  # the rest of a record a platform took only part of
            credit = ch.unsent_credit  # read once: the consumer's thread may replace it
            if credit is not None:
                if ch.write_record(CreditRecord(credit.generation, credit.elements)):
                    if ch.unsent_credit is credit:
                        ch.unsent_credit = None
            if ch.released and not ch.inbox:  # else they ride on the consumer's next credit
                ch.send_released()

    def _drain(self, ch: _ProcessChannel) -> bool:
        """Reads what a dead worker left in its pipe; True when something was read."""
        got = False
        try:
            while ch.conn.poll(0):
                self._read(ch)
                got = True
                if ch.lost is not None:
                    break
        except (OSError, EOFError):
            pass
        return got

    def _read(self, ch: _ProcessChannel) -> None:
        try:
            msg = ch.conn.recv()
        except (EOFError, OSError):
            self._lose(ch)
            return
        if isinstance(msg, ShmElements):
            try:
                (elements,) = self._reader.read(
                    msg.segment,
                    msg.payloads,
                    msg.layouts,
                    functools.partial(ch.released.append, msg.number),
                )
            except Exception as e:  # an unreadable message: the worker's failure
                import traceback

                msg_out: Any = Failure(
                    msg.seq, msg.generation, pickle_exception(e), traceback.format_exc()
                )
            else:
                msg_out = Elements(
                    msg.seq, msg.generation, msg.state, msg.skip, elements, msg.marks
                )
            if msg.fallback is not None:
                self._warn(f"a worker found too little room in /dev/shm ({msg.fallback})")
            msg = msg_out
        ch.inbox.append(msg)
        self._signal_ready(ch)

    def _lose(self, ch: _ProcessChannel) -> None:
        proc = ch.proc
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
        ch.lost = f"(pid {proc.pid}) was terminated unexpectedly with {how}"
        self._signal_ready()

    # --- closing -----------------------------------------------------------------------------------

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        for ch in self.channels:
            if ch.lost is None:
                ch.lost = "(closed)"
        self._signal_ready()
        self.wake()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(5.0)
        for ch in self.channels:
            try:
                ch.conn.send(Stop())
            except Exception:
                pass
        for ch in self.channels:
            for c in (ch.conn, ch.credits):
                try:
                    c.close()
                except Exception:
                    pass
        deadline = time.monotonic() + _STOP_GRACE_SECONDS
        for ch in self.channels:
            try:
                ch.proc.join(max(0.0, deadline - time.monotonic()))
            except Exception:
                pass
        for ch in self.channels:
            p = ch.proc
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
        self._reader.close()
        shm.sweep_shm(self.prefix)
        for sock in (self._wake_r, self._wake_w, self._ready_r, self._ready_w):
            try:
                sock.close()
            except OSError:
                pass


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
