"""The worker process's side of the process runtime (:mod:`grain_core.runtime.processes`), and the
wire records both sides share.

A worker process starts in :func:`worker_main` with its :class:`Boot`: it applies the consumer's
environment (:func:`restore_environment`, then ``WorkerEnvironment.apply``), arranges to die with
its consumer, and runs :class:`~grain_core.runtime.worker.WorkerLoop` over a pipe endpoint that
sends :class:`~grain_core.runtime.messages.Elements` as :class:`ShmElements` (elements in pooled
shared memory, :mod:`grain_core.runtime.shm`) and reads :class:`CreditRecord` s from the credit
channel (:mod:`grain_core.runtime.credits`). The contract is in the docstring of :mod:`grain_core.runtime.processes` and in
``docs/runtime.md``.
"""

from __future__ import annotations

import collections
import dataclasses
import mmap
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
from typing import Any

from grain_core import tree
from grain_core.runtime import shm
from grain_core.runtime.credits import CreditReceiver, CreditRecord
from grain_core.runtime.job import WorkerJob
from grain_core.runtime.messages import Consumed, Elements, Mark
from grain_core.runtime.waiting import Poller
from grain_core.runtime.worker import WorkerLoop

__all__ = [
    "SYS_PATH_ENV",
    "Boot",
    "CreditRecord",
    "PayloadFile",
    "PipeEndpoint",
    "ShmElements",
    "restore_environment",
    "worker_main",
]

SYS_PATH_ENV = "_GRAIN_CORE_FORKSERVER_SYS_PATH"  # read (and removed) by grain_core._forkserver_preload
_WATCHDOG_SECONDS = 0.25


# --------------------------------------------------------------------------------------------------
# wire records of this transport
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShmElements:
    """:class:`Elements` as sent: ``payloads`` holds one pickle of the element list, its large
    buffers in ``segment`` (None: all in the pickle). ``fallback`` says why shared memory was not
    used, when it was not."""

    seq: int
    generation: int
    state: Any
    skip: int
    segment: str | None
    payloads: list[bytes]
    layouts: list[tuple[tuple[int, int], ...]]
    marks: tuple[Mark, ...] = ()
    fallback: str | None = None
    #: The message's number among this worker's messages (0, 1, ...), which the consumer's
    #: ``RELEASED`` record names when it is done with it.
    number: int = 0


class PayloadFile:
    """A job's pipeline pickle in an anonymous memory file (Linux ``memfd``), handed to every
    worker as a file descriptor instead of through its start pipe.

    Through the pipe, each worker's copy of a large pipeline (a source held in memory: a list of
    JPEG records) is pickled again into the process object, written to the pipe and read back one
    worker after the other, before the next worker can start; through the file it is written once,
    and every worker maps it and unpickles from the mapping, all at once. The file has no name: it
    is gone when the consumer (:meth:`close`, once the workers are started) and every worker
    (after unpickling) have closed it, however they end. Pickled for a worker start (forkserver
    or spawn), it travels as a duplicated descriptor (``multiprocessing.reduction.DupFd``, as
    pipes do).
    """

    #: Whether this platform has anonymous memory files (else pipelines go through the pipe).
    AVAILABLE = hasattr(os, "memfd_create")
    #: Pipelines smaller than this go through the pipe (a file costs more than it saves).
    MIN_BYTES = 1 << 20

    def __init__(self, fd: int, size: int):
        self.fd = fd
        self.size = size

    @classmethod
    def create(cls, payload: bytes) -> PayloadFile:
        fd = os.memfd_create("grain_core-job", os.MFD_CLOEXEC)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, len(payload))

    def __reduce__(self):
        from multiprocessing.reduction import DupFd

        return PayloadFile._rebuild, (DupFd(self.fd), self.size)

    @staticmethod
    def _rebuild(dup: Any, size: int) -> PayloadFile:
        return PayloadFile(dup.detach(), size)

    def open(self) -> mmap.mmap:
        """The pickle, mapped read-only (close the mapping once unpickled); closes the descriptor."""
        try:
            return mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ)
        finally:
            self.close()

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


@dataclasses.dataclass(frozen=True)
class Boot:
    """The one argument of a worker process. With ``payload_file``, the job's ``payload`` is
    empty and the pipeline's pickle is in that file."""

    conn: Any
    credits: Any  # the worker's end of the credit channel (a socket, grain_core.runtime.credits)
    index: int
    job: WorkerJob
    prefix: str
    consumer_pid: int
    use_shm: bool
    min_free: int
    payload_file: PayloadFile | None = None


# --------------------------------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------------------------------


class PipeEndpoint:
    """The worker's end of the pipe transport (a :class:`~grain_core.runtime.transport.WorkerEndpoint`
    for a ``WorkerLoop``): ``conn`` the worker's end of the message pipe (a
    ``multiprocessing.connection.Connection``), ``credits`` its end of the credit channel (a
    socket). Elements go out as :class:`ShmElements` in segments named from ``prefix`` (with
    ``use_shm``; pickled through the pipe otherwise, or when ``/dev/shm`` keeps less than
    ``min_free`` bytes free); a segment is reused once the consumer's credit channel says it is
    done with its message. :meth:`receive` raises ``EOFError`` when the consumer closed its end or
    its process ``consumer_pid`` is gone. The consumer's side is
    :class:`~grain_core.runtime.pipe_pool.PipePool`. Call :meth:`close` when the loop has ended:
    it unlinks the worker's segments (every name under ``prefix``) and closes both channels."""

    def __init__(
        self,
        conn: Any,
        credits: Any,
        *,
        prefix: str,
        consumer_pid: int,
        use_shm: bool = True,
        min_free: int | None = None,
    ):
        self.conn = conn
        self.prefix = prefix
        if min_free is None:
            min_free = shm.shm_min_free_bytes()
        self.writer = shm.MessageWriter(prefix, min_free) if use_shm else None
        self.sent_messages = 0
        self.lock = threading.Lock()
        self.consumer_pid = consumer_pid
        self.credits = CreditReceiver(credits)
        # Both channels, waited on together for every command (grain_core.runtime.waiting).
        self.poller = Poller()
        self.conn_key = self.poller.register(conn)
        self.credit_key = self.poller.register(self.credits)
        self.credits_in: collections.deque[Consumed] = collections.deque()

    def send(self, message: Any) -> None:
        # Called by the worker loop's thread and its flusher thread: one at a time.
        with self.lock:
            if isinstance(message, Elements):
                message = self._encode(message)
                self.sent_messages += 1
            self.conn.send(message)

    def _encode(self, m: Elements) -> ShmElements:
        # The whole list is one pickle (one call, not one per element); large buffers of every
        # element go to the message's segment.
        w = self.writer
        if w is None:
            return _pickled(m)
        number = w.messages
        try:
            w.add(m.elements)
            name, payloads, layouts = w.finish()
        except shm.ShmFullError as e:
            w.pass_through()
            return _pickled(m, str(e), number)
        return ShmElements(
            m.seq, m.generation, m.state, m.skip, name, payloads, layouts, m.marks, None, number
        )

    def receive(self, timeout: float | None) -> Any:
        if self.credits_in:
            return self.credits_in.popleft()
        conn = self.conn
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 0.5 if deadline is None else max(0.0, deadline - time.monotonic())
            ready = self.poller.wait(min(left, 0.5))
            if self.credit_key in ready:
                self._read_credits()
            if self.conn_key in ready:
                return conn.recv()
            if self.credits_in:
                return self.credits_in.popleft()
            if deadline is not None and time.monotonic() >= deadline:
                return None
            if not _alive(self.consumer_pid):
                raise EOFError("the consumer is gone")

    def _read_credits(self) -> None:
        """Applies the released counts on the credit channel and queues its latest credit."""
        records = self.credits.read()
        if not records:
            return
        released = []
        latest: Consumed | None = None
        for generation, count in records:
            if generation == CreditRecord.RELEASED:
                released.append(count)
            elif latest is None or (generation, count) >= (latest.generation, latest.elements):
                latest = Consumed(generation, count)
        if released and self.writer is not None:
            with self.lock:
                for number in released:
                    self.writer.release(number)
        if latest is not None:
            self.credits_in.append(latest)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        shm.sweep_shm(self.prefix)
        for c in (self.conn, self.credits):
            try:
                c.close()
            except Exception:
                pass


def _pickled(m: Elements, fallback: str | None = None, number: int = 0) -> ShmElements:
    """``m`` with its elements pickled whole, through the pipe (``fallback``: why not shared memory)."""
    return ShmElements(
        m.seq, m.generation, m.state, m.skip, None, [_dumps(m.elements)], [()], m.marks, fallback,
        number,
    )  # fmt: skip


def _dumps(x: Any) -> bytes:
    try:
        return pickle.dumps(x, protocol=5)
    except Exception:
        import cloudpickle

        return cloudpickle.dumps(x, protocol=5)


def _alive(pid: int) -> bool:
    if os.name != "posix":  # os.kill(pid, 0) would end the process there: ask multiprocessing
        parent = mp.parent_process()
        return parent is None or parent.is_alive()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _die_with_parent(consumer_pid: int, prefix: str) -> None:
    """The worker ends when its consumer does, unlinking its segments: ``SIGTERM`` does that at
    once; Linux sends it when the worker's parent (the consumer, or the forkserver, which exits with
    the consumer) dies (``PR_SET_PDEATHSIG``); a watchdog thread checks the consumer's pid too."""

    def on_term(signum: int, frame: Any) -> None:
        shm.sweep_shm(prefix)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception:
            pass

    def watch() -> None:
        while _alive(consumer_pid):
            time.sleep(_WATCHDOG_SECONDS)
        shm.sweep_shm(prefix)
        os._exit(0)

    threading.Thread(target=watch, name="grain_core-mp-watchdog", daemon=True).start()


def restore_environment() -> None:
    """In a new helper interpreter: undoes what :func:`grain_core.runtime.processes._worker_start` set for the start and applies
    the consumer's ``sys.path`` (the forkserver's preload calls it before plugin discovery)."""
    import json

    raw = os.environ.pop(SYS_PATH_ENV, None)
    if raw is None:
        return
    try:
        saved = json.loads(raw)
        sys.path[:] = [str(p) for p in saved["sys_path"]]
        if saved.get("safe_path") is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = str(saved["safe_path"])
    except (ValueError, KeyError, TypeError):
        pass


def worker_main(boot: Boot) -> None:
    """Entry point of a worker process; returns when stopped or orphaned."""
    restore_environment()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to handle.
    _die_with_parent(boot.consumer_pid, boot.prefix)
    endpoint = PipeEndpoint(
        boot.conn,
        boot.credits,
        prefix=boot.prefix,
        consumer_pid=boot.consumer_pid,
        use_shm=boot.use_shm,
        min_free=boot.min_free,
    )
    try:
        job = boot.job
        job.environment.apply()
        mapped = None if boot.payload_file is None else boot.payload_file.open()
        if mapped is not None:
            job = dataclasses.replace(job, payload=mapped)  # type: ignore[arg-type]
        try:
            loop = WorkerLoop(job, boot.index, endpoint, size_of=tree.nbytes)
        finally:
            if mapped is not None:
                mapped.close()
        # The pipeline's pickle is not needed once unpickled: a source it carries (a list of
        # records) would otherwise stay in this process twice. The Process object and ``boot``
        # hold the job for the worker's whole life, so the bytes are dropped from both.
        loop.job = dataclasses.replace(job, payload=b"")
        object.__setattr__(boot, "job", loop.job)
        del job
        loop.run()
    except (EOFError, OSError):
        pass  # the consumer went away
    finally:
        endpoint.close()
