"""The consumer side of the runtime: :class:`RoundRobinConsumer`, the ``DatasetIterator`` the user
holds, round-robin over the workers' channels with an exact state; and :func:`next_or_rollback`.

Part of the runtime API (:mod:`grain_core.runtime.api` re-exports the public names; see
``docs/runtime.md``). The turn order and the state format (``kind`` :data:`STATE_KIND`) are the one
round-robin of :mod:`grain_core.runtime.round_robin`, shared with ``multithread_prefetch``.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from grain_core import grain_states as _grain_states
from grain_core.dataset import elastic
from grain_core.dataset.base import IterDataset
from grain_core.dataset.fast_next import list_serving_next
from grain_core.dataset.iterator import DatasetIterator
from grain_core.runtime import round_robin
from grain_core.runtime.cursor import (
    Cursor,
    WorkerView,
    fold_run,
    run_elements,
    run_length,
    share_of,
    with_worker,
)
from grain_core.runtime.job import WorkerJob
from grain_core.runtime.malloc_tuning import tune_malloc
from grain_core.runtime.messages import (
    Consumed,
    Elements,
    End,
    Failure,
    FromWorker,
    Idle,
    Start,
    Stats,
    Template,
    ToWorker,
)
from grain_core.runtime.transport import WorkerError, WorkerLostError, WorkerPool

__all__ = ["STATE_KIND", "RoundRobinConsumer", "next_or_rollback"]

#: ``kind`` of the consumer's state (unchanged from earlier releases: checkpoints stay readable).
STATE_KIND = elastic.MP_KIND

WAIT_SECONDS = 0.05


def next_or_rollback(it: Any) -> Any:
    """``next(it)`` for a wrapper that returns the element as it is: when an exception (Ctrl-C) is
    raised into this call after ``it`` returned an element, ``it`` is rolled back so that the next
    ``next()`` returns that element again. ``it`` takes part by having ``rollback_mark()`` and
    ``rollback(mark)`` (:class:`RoundRobinConsumer` and the thread-prefetch iterator do); for any
    other iterator this is ``next(it)``."""
    mark_fn = getattr(it, "rollback_mark", None)
    if mark_fn is None:
        # it.__next__() rather than next(it): for an iterator written in Python this is a
        # Python-level call, after whose return CPython runs no signal handler before this frame
        # returns the element (after the builtin next() it does, and the element would be lost).
        return it.__next__()
    mark = mark_fn()
    try:
        return next(it)
    except StopIteration:
        raise
    except BaseException:
        it.rollback(mark)
        raise


_PENDING = object()
_tuple_new = tuple.__new__


class RoundRobinConsumer(DatasetIterator):
    """Round-robin over the workers of a :class:`WorkerPool`; exact state; elastic restore.

    The workers start producing at the first ``next()`` / ``start_prefetch()``, at the position last
    given by ``set_state``. ``set_state`` keeps the workers and sends them the new position; it first
    compares each worker state with that worker's fresh-iterator state
    (:func:`grain_core.state.check_same_pipeline`), so a state of another pipeline is refused before
    anything changes. A state saved with another worker count (or in process) is converted by
    :func:`grain_core.dataset.elastic.adapt_state` where that is defined (inside
    :func:`grain_core.runtime.round_robin.read_state`, which checks what comes back).

    An exception raised into ``next()`` (``KeyboardInterrupt``) leaves the iterator consistent:
    calling ``next()`` again continues with exactly the elements not yet returned.
    """

    def __init__(
        self,
        pool: WorkerPool,
        job: WorkerJob,
        parent: IterDataset,
        collect_stats: bool = False,
    ):
        super().__init__()
        tune_malloc()  # elements copied out and freed at the worker's rate: no re-faulting
        self._pool = pool
        self._channels = list(pool.channels)
        self._k = k = len(self._channels)
        if k != job.worker_count:
            pool.close()
            raise ValueError(f"the runtime started {k} workers, not {job.worker_count}.")
        # Without the pipeline's pickle: the workers have it (a runtime that restarts workers keeps
        # its own job), and a source it carries would otherwise stay in memory twice.
        self._job = dataclasses.replace(job, payload=b"")
        self._parent_ds = parent
        self._closed = False
        self._started = False
        self._error: BaseException | None = None
        self._cursor = Cursor(0, 0, 0, tuple(WorkerView() for _ in range(k)))
        self._prev: Cursor | None = None  # the cursor before the last element returned
        # The run (see _start_run): elements next() serves in order from _run[_run_pos] while
        # _run_pos < _run_stop, before the thread guard and with no change to _cursor, which stays
        # the position before the run's first element until _settle() folds the served ones in.
        self._run: list[Any] = []
        self._run_pos = 0
        self._run_stop = 0
        self._credited = [0] * k
        self._templates: list[Any] = [_PENDING] * k
        self._elastic_problems: list[str | None] = [None] * k
        self._worker_stats: list[Any] | None = [None] * k if collect_stats else None
        self._credit_step = max(1, job.buffer_size // 2)
        self._buffer_size = job.buffer_size
        # Garbage collection and interpreter exit stop the workers (the finalizer holds the pool).
        self._finalizer = weakref.finalize(self, pool.close)

    # --- public hooks ------------------------------------------------------------------------------

    @property
    def num_workers(self) -> int:
        return self._k

    @property
    def pool(self) -> WorkerPool:
        """The runtime's workers (e.g. ``pool.worker_pids`` for the process runtime)."""
        return self._pool

    def worker_stats(self) -> list[Any] | None:
        """Each worker's latest statistics report (``grain_core.stats``); None when not collected."""
        return None if self._worker_stats is None else list(self._worker_stats)

    # --- reading -----------------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self._started:
            return
        cur = self._cursor
        k = self._k
        for i in [(cur.next_worker + j) % k for j in range(k)]:  # whose element comes next: first
            w = cur.workers[i]
            if w.exhausted:
                self._send(i, Idle(cur.generation))
            else:
                pos = w.position()
                self._send(i, Start(cur.generation, pos.state, pos.skip))
        self._started = True

    def _send(self, i: int, msg: ToWorker) -> None:
        try:
            self._channels[i].send(msg)
        except (OSError, EOFError):
            pass  # reported as a lost worker when its turn comes

    def start_prefetch(self) -> None:
        if not self._closed:
            self._ensure_started()

    def _next_full(self) -> Any:
        p = self._run_pos
        if p < self._run_stop:  # the run, served here when the fast path was not taken
            self._run_pos = p + 1
            return self._run[p]
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        if self._error is not None:
            raise self._error
        self._ensure_started()
        self._settle()
        if self._start_run():
            self._run_pos = 1
            return self._run[0]
        k = self._k
        while True:
            cur = self._cursor
            i = cur.next_worker
            w = cur.workers[i]
            if w.exhausted:
                if all(x.exhausted for x in cur.workers):
                    raise StopIteration
                self._cursor = cur._replace(next_worker=round_robin.turn_after(i, k))
                continue
            if w.buffered:
                msg = w.buffered[0]
                x = msg.elements[w.offset]
                offset = w.offset + 1
                rest = w.buffered
                size = len(msg.elements)
                if offset == size:
                    rest, offset = rest[1:], 0
                consumed = w.consumed + 1
                if offset:
                    st, sk, last, taken = None, 0, msg, offset
                else:  # returned wholly: keep its end position, not its elements
                    end = msg.position_after(size)
                    st, sk, last, taken = end.state, end.skip, None, 0
                # tuple.__new__ directly: a named tuple's own __new__ is one more Python call
                # per element (the fields in their declared order).
                nw = _tuple_new(
                    WorkerView,
                    (
                        st,
                        sk,
                        w.ended and not rest,
                        w.ended,
                        rest,
                        offset,
                        consumed,
                        w.seq,
                        w.failure,
                        last,
                        taken,
                    ),
                )
                ws = cur.workers
                new = _tuple_new(
                    Cursor,
                    (
                        cur.generation,
                        round_robin.turn_after(i, k),
                        cur.position + 1,
                        ws[:i] + (nw,) + ws[i + 1 :],
                    ),
                )
                # (rest holds the message itself until it is returned wholly)
                later = len(rest) > (offset != 0)
                if self._credit_due(offset == 0, later, size - offset, consumed - self._credited[i], size):
                    self._credit(i, cur.generation, consumed)
                # The commit: one store, then return with no call in between (an exception raised
                # into next() lands before it, or in the caller after the element was returned).
                self._prev = cur
                self._cursor = new
                return x
            if w.failure is not None:
                self._error = self._worker_exception(i, w.failure)
                raise self._error
            if w.ended:  # End received, every element returned
                self._cursor = with_worker(cur, i, w._replace(exhausted=True))
                continue
            self._receive(i)

    __next__ = list_serving_next("_run", "_run_pos", _next_full, stop="_run_stop")

    def _start_run(self) -> bool:
        """Lays out the run (:func:`~grain_core.runtime.cursor.run_length`) when it holds at least
        two elements: ``_run``, ``_run_stop``; ``_cursor`` unchanged. True when it did."""
        cur = self._cursor
        stop = run_length(cur, self._credited, self._credit_step, self._buffer_size)
        if stop < 2:
            return False
        self._run = run_elements(cur, stop)
        self._run_stop = stop
        return True

    def _settle(self) -> None:
        """Folds the elements served from the run into ``_cursor`` and ends the run. Every other
        reader of ``_cursor`` calls this first."""
        if self._run_stop == 0:
            return
        new = fold_run(self._cursor, self._run_pos)
        # One commit with no call in between: the cursor, then the run ended.
        self._cursor = new
        self._run_stop = 0
        self._run_pos = 0
        self._run = []
        self._prev = None

    def next_chunk(self, max_elements: int) -> list[Any]:
        """Up to ``max_elements`` elements in the round-robin order, from what the workers have
        already delivered: waits only when the next element has not arrived (then it is
        ``next()``). The state afterwards is the position after the last element returned, and
        the whole chunk is committed with one assignment (an interrupt leaves all or nothing)."""
        if self._closed or self._error is not None or max_elements <= 1:
            return [self.__next__()]
        self._ensure_started()
        self._settle()
        cur = self._cursor
        for j in range(self._k):
            if not cur.workers[j].exhausted:
                self._absorb(j)
        cur = self._cursor
        k = self._k
        ws = cur.workers
        queues = [list(w.buffered) for w in ws]
        offsets = [w.offset for w in ws]
        exhausted = [w.exhausted for w in ws]
        took = [0] * k
        last: list[tuple[Elements, int] | None] = [None] * k  # message and offset last taken
        out: list[Any] = []
        append = out.append
        i = cur.next_worker
        left = k - sum(exhausted)
        while len(out) < max_elements and left:
            if exhausted[i]:
                i = round_robin.turn_after(i, k)
                continue
            q = queues[i]
            if not q:
                w = ws[i]
                if w.ended and w.failure is None:  # End received, every element returned
                    exhausted[i] = True
                    left -= 1
                    i = round_robin.turn_after(i, k)
                    continue
                break  # not arrived yet (or a failure): the next call handles it
            msg = q[0]
            o = offsets[i]
            append(msg.elements[o])
            last[i] = (msg, o)
            o += 1
            if o == len(msg.elements):
                q.pop(0)
                o = 0
            offsets[i] = o
            took[i] += 1
            i = round_robin.turn_after(i, k)
        if not out:
            return [self.__next__()]
        new_ws = list(ws)
        for j in range(k):
            w = ws[j]
            lt = last[j]
            if lt is None:
                if exhausted[j] != w.exhausted:
                    new_ws[j] = w._replace(exhausted=True)
                continue
            msg, o = lt
            rest = tuple(queues[j])
            consumed = w.consumed + took[j]
            if o + 1 < len(msg.elements):
                st, sk, last_msg, taken = None, 0, msg, o + 1
            else:  # returned wholly: keep its end position, not its elements
                end = msg.position_after(o + 1)
                st, sk, last_msg, taken = end.state, end.skip, None, 0
            new_ws[j] = WorkerView(
                st,
                sk,
                exhausted[j] or (w.ended and not rest),
                w.ended,
                rest,
                offsets[j],
                consumed,
                w.seq,
                w.failure,
                last_msg,
                taken,
            )
            size = len(msg.elements)
            if self._credit_due(
                len(rest) < len(w.buffered),  # a message returned wholly
                len(rest) > (last_msg is not None),  # messages received after it
                size - offsets[j] if last_msg is not None else 0,
                consumed - self._credited[j],
                size,
            ):
                self._credit(j, cur.generation, consumed)
        new = Cursor(cur.generation, i, cur.position + len(out), tuple(new_ws))
        # The commit: one store, then return with no call in between (see __next__).
        self._prev = cur
        self._cursor = new
        return out

    def _absorb(self, i: int) -> None:
        """Applies the messages worker ``i`` has delivered, without waiting for more."""
        ch = self._channels[i]
        while True:
            try:
                msg = ch.peek(0)
            except WorkerLostError:
                return  # reported by next() when this worker's turn comes
            if msg is None:
                return
            self._apply(i, msg)
            ch.drop()

    def rollback_mark(self) -> Any:
        """A mark for :meth:`rollback` (see :func:`next_or_rollback`): the count of elements
        returned."""
        return self._cursor.position + (self._run_pos if self._run_stop else 0)

    def rollback(self, mark: Any) -> None:
        """Un-returns the element returned since ``mark``, if exactly one was (its caller was
        interrupted before it got it): the next ``next()`` returns it again."""
        if self._run_stop:
            p = self._run_pos
            if p and self._cursor.position + p == mark + 1:
                self._run_pos = p - 1  # served again from the run
            return
        prev = self._prev
        if prev is not None and self._cursor.position == mark + 1 == prev.position + 1:
            self._cursor = prev  # the cursor just before that element was taken

    def _credit_due(
        self, whole: bool, later: bool, left: int, uncredited: int, size: int
    ) -> bool:
        """Whether to send a worker its ``Consumed`` count now, after elements of a message of
        ``size`` were returned: ``whole`` (the message is returned wholly), ``later`` (messages of
        that worker's were received after it), ``left`` (its elements not returned yet),
        ``uncredited`` (elements returned since the last credit).

        A worker waits for a credit when its elements ahead exceed its buffer and either its count
        bound or its byte allowance, which frees a message's bytes only once that message is
        returned wholly. So a credit is sent when a message is returned wholly; in the middle of
        the last message received only once the rest fits the buffer (before that, the count
        cannot let the worker go on: each credit would be a system call and a wake-up of the
        worker for nothing); and every half message or half buffer. The consumer never waits for a
        worker while it holds elements of that worker's, so a held-back credit is always sent
        before the consumer could wait for it."""
        return (
            whole
            or (not later and left <= self._buffer_size)
            or uncredited >= max(self._credit_step, size >> 1)
        )

    def _credit(self, i: int, generation: int, consumed: int) -> None:
        self._send(i, Consumed(generation, consumed))
        self._credited[i] = consumed

    def _receive(self, i: int) -> None:
        """Applies worker ``i``'s next message (waiting for it)."""
        ch = self._channels[i]
        while True:
            if self._closed:
                raise RuntimeError("This iterator was closed while waiting for an element.")
            try:
                msg = ch.peek(WAIT_SECONDS)
            except WorkerLostError as e:
                if self._closed:
                    raise RuntimeError(
                        "This iterator was closed while waiting for an element."
                    ) from None
                self._error = WorkerError(
                    f"mp_prefetch worker {i} {e} while the iterator waited for output element "
                    f"#{self._cursor.position}. It may have been killed (e.g. by the "
                    "out-of-memory killer) or crashed in native code. Create a new iterator (or "
                    "restore a saved state into one) to continue."
                )
                raise self._error from None
            if msg is None:
                continue
            applied = self._apply(i, msg)
            ch.drop()
            if applied:
                return

    def _apply(self, i: int, msg: FromWorker) -> bool:
        """Records ``msg``; True when worker ``i``'s view changed (elements, end or failure)."""
        if isinstance(msg, Template):
            self._templates[i] = msg.state
            self._elastic_problems[i] = msg.elastic_problem
            return False
        cur = self._cursor
        w = cur.workers[i]
        if msg.generation != cur.generation or msg.seq <= w.seq:
            return False  # outdated, or applied before an interruption
        if isinstance(msg, Stats):
            if self._worker_stats is not None:
                self._worker_stats[i] = msg.report
            return False
        if isinstance(msg, Elements):
            nw = w._replace(buffered=w.buffered + (msg,), seq=msg.seq)
        elif isinstance(msg, End):
            nw = w._replace(ended=True, seq=msg.seq)
        elif isinstance(msg, Failure):
            nw = w._replace(failure=msg, seq=msg.seq)
        else:
            raise WorkerError(f"unexpected message {msg!r} from mp_prefetch worker {i}.")
        self._cursor = with_worker(cur, i, nw)
        return True

    def _worker_exception(self, i: int, f: Failure) -> BaseException:
        where = (
            f"raised in mp_prefetch worker {i} of {self._k} while producing output element "
            f"#{self._cursor.position}"
        )
        exc: BaseException | None = None
        if f.exception is not None:
            try:
                import pickle

                exc = pickle.loads(f.exception)
            except Exception:
                exc = None
        if isinstance(exc, BaseException):
            exc.add_note(f"{where}. Worker traceback:\n{f.traceback}")
            return exc
        return WorkerError(f"Exception {where}. Worker traceback:\n{f.traceback}")

    # --- state --------------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        self._settle()
        cur = self._cursor
        return round_robin.make_state(
            STATE_KIND, cur.next_worker, cur.position, [share_of(w) for w in cur.workers]
        )

    def set_state(self, state: dict[str, Any]) -> None:
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        if _grain_states.is_grain_mp_state(state):  # saved by Grain's mp_prefetch iterator
            state = _grain_states.from_grain_mp_state(
                state, [self.template(i) for i in range(self._k)]
            )
        saved = round_robin.read_state(state, STATE_KIND, self._k, self.template, elastic_for=self)
        gen = self._cursor.generation + 1
        views = tuple(
            WorkerView(state=w.state, skip=w.skip, exhausted=w.exhausted, ended=w.exhausted)
            for w in saved.shares
        )
        self._started = False
        self._error = None
        self._credited = [0] * self._k
        self._settle()  # (ends the run; the cursor is replaced next)
        self._prev = None
        self._cursor = Cursor(gen, saved.next_worker, saved.position, views)

    def template(self, i: int) -> Any:
        """Worker ``i``'s fresh-iterator state, waiting for it if needed; None if the worker cannot
        give one (it failed to build its pipeline, or is gone: reported at ``next()``)."""
        ch = self._channels[i]
        try:
            while self._templates[i] is _PENDING and not self._closed:
                msg = ch.peek(WAIT_SECONDS)
                if msg is None:
                    continue
                if isinstance(msg, Template):
                    self._apply(i, msg)
                    ch.drop()
                else:  # the template is always a worker's first message
                    self._templates[i] = None
        except WorkerLostError:
            self._templates[i] = None
        t = self._templates[i]
        return None if t is _PENDING else t

    def elastic_target(self) -> elastic.ElasticTarget:
        """What this iterator offers an elastic restore (hook of :mod:`grain_core.dataset.elastic`)."""
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        templates = [self.template(i) for i in range(self._k)]
        problem = next((p for p in self._elastic_problems if p is not None), None)
        if self._job.sequential_slice:
            problem = (
                "its workers read contiguous slices of the sources (sequential_slice=True), and "
                "what each worker reads depends on the worker count."
            )
        if problem is None and any(t is None for t in templates):
            problem = "a worker could not build its pipeline (its error is raised at next())."
        return elastic.worker_target(self._parent_ds, templates, problem)

    # --- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the workers and frees what they hold. Idempotent; safe from another thread."""
        self._closed = True
        self._run_stop = 0  # next() serves nothing more from the run: it raises
        self._finalizer()
