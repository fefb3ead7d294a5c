"""The consumer's side of the pipe transport, for workers started by any runtime on this host.

A :class:`PipePool` is a :class:`~grain_core.runtime.transport.WorkerPool` whose channels each read
one worker over two local connections: a *message pipe* (a ``multiprocessing.connection.Connection``
carrying the typed messages, with elements as :class:`~grain_core.runtime.process_worker.ShmElements`
in pooled shared memory) and a *credit channel* (:mod:`grain_core.runtime.credits`). One I/O thread
reads every pipe as messages arrive (lending or copying out their arrays, see
:class:`~grain_core.runtime.shm.MessageReader`) and sends the commands the consumer queued; the
consumer's own thread writes credits straight to the credit channels. The worker's side is
:class:`~grain_core.runtime.process_worker.PipeEndpoint` (any ``WorkerLoop`` run over it).

Who starts the workers is the runtime's business: :class:`~grain_core.runtime.processes.ProcessPool`
starts processes and attaches their pipes before the I/O thread starts; a runtime whose workers
come up later (Ray actors on this node, ``grain-plugin-ray``) makes its :class:`PipePool` at once
and attaches each worker when its connections are made (:meth:`PipePool.attach`, any time before
:meth:`PipePool.close`). Each attached worker comes with a :class:`PipeWorker`: how to wait for its
death (a ``sentinel``, or None: the pipe's end of file says so), how to describe it, how to stop it.

Every wait is bounded (:mod:`grain_core.runtime.waiting`); :meth:`PipePool.close` sends each worker
:class:`~grain_core.runtime.messages.Stop`, closes the connections, stops the workers (their
:meth:`PipeWorker.stop`, within :data:`STOP_GRACE_SECONDS` together) and frees the reader's
mappings. The contract of the whole transport is in the docstring of
:mod:`grain_core.runtime.processes` and in ``docs/runtime.md``.
"""

from __future__ import annotations

import collections
import functools
import socket
import threading
import time
import warnings
from typing import Any, Protocol

from grain_core.runtime import shm
from grain_core.runtime.credits import CreditRecord, CreditSender
from grain_core.runtime.messages import Consumed, Elements, Failure, Stop, pickle_exception
from grain_core.runtime.process_worker import ShmElements
from grain_core.runtime.transport import WorkerLostError
from grain_core.runtime.waiting import Poller

__all__ = ["STOP_GRACE_SECONDS", "PipeChannel", "PipePool", "PipeWorker"]

#: How long :meth:`PipePool.close` lets the workers end by themselves after ``Stop``, in all.
STOP_GRACE_SECONDS = 0.5


def _released_records(numbers: list[int]) -> bytes:
    return b"".join(CreditRecord(CreditRecord.RELEASED, n).pack() for n in numbers)


class PipeWorker(Protocol):
    """What a :class:`PipePool` needs of a worker it did not start."""

    @property
    def sentinel(self) -> Any:
        """Something :mod:`grain_core.runtime.waiting` can wait on that becomes ready when the
        worker dies (a process sentinel), or None: the message pipe's end of file tells."""

    def loss(self) -> str:
        """How the worker was lost, for :class:`WorkerLostError` (called once, from the I/O
        thread, after its sentinel or its pipe said so; may wait up to a second)."""

    def stop(self, deadline: float) -> None:
        """Ends the worker, which was sent ``Stop`` and whose connections are closed; waits at
        most until ``time.monotonic()`` reaches ``deadline`` for it to end by itself."""


class PipeChannel:
    """The consumer's end of one worker: an inbox filled by the pool's I/O thread, an outbox the
    I/O thread sends from, and the credit channel. A ``Consumed`` count is written to the credit
    channel by the calling thread itself (never blocking); only when the channel is full (the
    worker has not read for thousands of records) is it left to the I/O thread, which retries the
    latest count until it fits."""

    def __init__(self, pool: PipePool, worker: PipeWorker, conn: Any, credits: CreditSender):
        self._pool = pool
        self.worker = worker
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


class PipePool:
    """Channels over message pipes and credit channels, and the consumer's I/O thread; see the
    module docstring. ``use_shm``: whether workers may send elements through shared memory (the
    reader then lends arrays up to :func:`~grain_core.runtime.shm.lend_allowance`); when
    ``/dev/shm`` has less than twice ``min_free`` bytes free it is False (with a warning), and
    :attr:`use_shm` says what was decided (tell the workers)."""

    def __init__(self, use_shm: bool = True, min_free: int | None = None):
        self.channels: list[PipeChannel] = []
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
        self._waiting_for: PipeChannel | None = None  # the channel the consumer waits for
        self._ready_r.setblocking(False)
        self._ready_w.setblocking(False)
        self._ready_poller = Poller()  # the consumer's thread waits on it (wait_ready)
        self._ready_poller.register(self._ready_r)
        self._warned = False
        self._attached = 0  # channels the I/O thread has registered
        self._thread: threading.Thread | None = None
        use_shm = use_shm and shm.SHM_AVAILABLE  # else pickled through the pipes (Windows)
        if use_shm:
            shm.reclaim_stale_shm()
        self.min_free = shm.shm_min_free_bytes() if min_free is None else min_free
        free = shm.free_bytes() if use_shm else None
        if free is not None and free < 2 * self.min_free:
            use_shm = False
            self._warn(
                f"/dev/shm has only {free >> 20} MiB free (at least {(2 * self.min_free) >> 20} "
                f"MiB wanted, see {shm.MIN_FREE_ENV})"
            )
        if use_shm:
            self._reader.lend_bytes = shm.lend_allowance()
        #: Whether the workers send elements through shared memory.
        self.use_shm = use_shm

    @property
    def closed(self) -> bool:
        return self._closed

    def attach(self, worker: PipeWorker, conn: Any, credits: CreditSender) -> PipeChannel:
        """Adds a channel for ``worker``, whose message pipe's consumer end is ``conn`` and whose
        credit channel's is ``credits`` (the pool owns both from now on), and starts the I/O thread
        if it is not running. Raises ``RuntimeError`` once the pool is closed (closing both)."""
        ch = PipeChannel(self, worker, conn, credits)
        with self._close_lock:
            if self._closed:
                for c in (conn, credits):
                    c.close()
                raise RuntimeError("the pool is closed")
            self.channels.append(ch)
        self.start()
        self.wake()  # a running I/O thread registers it
        return ch

    def start(self) -> None:
        """Starts the I/O thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._io_loop, name="grain_core-mp-io", daemon=True
            )
            self._thread.start()

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

    def _signal_ready(self, ch: PipeChannel | None = None) -> None:
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

    def wait_ready(self, ch: PipeChannel, timeout: float) -> None:
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

    def _register_new(self, poller: Poller, by_fd: dict[int, tuple[bool, PipeChannel]]) -> None:
        channels = self.channels
        while self._attached < len(channels):
            c = channels[self._attached]
            self._attached += 1
            by_fd[poller.register(c.conn)] = (True, c)
            sentinel = c.worker.sentinel
            if sentinel is not None:
                by_fd[poller.register(sentinel)] = (False, c)

    def _io_loop(self) -> None:
        # One poller for the thread's life (grain_core.runtime.waiting: a selector built per wait
        # cost more than the read it waited for); a lost worker's pipe and sentinel are removed.
        poller = Poller()
        wake = poller.register(self._wake_r)
        by_fd: dict[int, tuple[bool, PipeChannel]] = {}  # fd -> (is the pipe, channel)
        while not self._closed:
            self._register_new(poller, by_fd)
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
                    self._register_new(poller, by_fd)
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
        for ch in self.channels[: self._attached]:
            if ch.lost is not None:
                continue
            try:
                while ch.outbox:
                    ch.conn.send(ch.outbox.popleft())
            except (OSError, EOFError):
                pass  # the worker is gone: its sentinel or its pipe says so
            ch.credits.flush()  # the rest of a record a platform took only part of
            credit = ch.unsent_credit  # read once: the consumer's thread may replace it
            if credit is not None:
                if ch.write_record(CreditRecord(credit.generation, credit.elements)):
                    if ch.unsent_credit is credit:
                        ch.unsent_credit = None
            if ch.released and not ch.inbox:  # else they ride on the consumer's next credit
                ch.send_released()

    def _drain(self, ch: PipeChannel) -> bool:
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

    def _read(self, ch: PipeChannel) -> None:
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

    def _lose(self, ch: PipeChannel) -> None:
        try:
            how = ch.worker.loss()
        except Exception as e:  # a description must not take the I/O thread down
            how = f"was lost ({type(e).__name__}: {e})"
        ch.lost = how
        self._signal_ready()

    # --- closing -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the workers and frees what the pool holds. Idempotent; safe from any thread, from
        a finalizer and at interpreter exit."""
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
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for ch in self.channels:
            try:
                ch.worker.stop(deadline)
            except Exception:
                pass
        self._reader.close()
        for sock in (self._wake_r, self._wake_w, self._ready_r, self._ready_w):
            try:
                sock.close()
            except OSError:
                pass
