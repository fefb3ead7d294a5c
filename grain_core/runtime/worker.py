"""The worker side of the runtime: :class:`WorkerLoop` runs one worker share over a
:class:`~grain_core.runtime.transport.WorkerEndpoint`.

Part of the runtime API (:mod:`grain_core.runtime.api` re-exports :class:`WorkerLoop` and
:data:`AHEAD_BYTES`; flow control and marks are described there and in ``docs/runtime.md``).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from grain_core.dataset import elastic
from grain_core.dataset.iterator import DatasetIterator
from grain_core.runtime.job import WorkerJob
from grain_core.runtime.malloc_tuning import tune_malloc
from grain_core.runtime.messages import (
    Consumed,
    Elements,
    End,
    Failure,
    FromWorker,
    Mark,
    Start,
    Stats,
    Stop,
    Template,
    ToWorker,
    pickle_exception,
)
from grain_core.runtime.transport import WorkerEndpoint

__all__ = ["AHEAD_BYTES", "WorkerLoop"]

_log = logging.getLogger(__name__)

MAX_MESSAGE_ELEMENTS = 256
MAX_MESSAGE_BYTES = 64 << 20
#: Small elements may run further ahead than ``buffer_size + 1``: a worker also starts another
#: element while the elements it has ahead of ``next()`` (sent, or in the group being produced) take
#: under this many bytes, as measured by the transport's ``size_of`` (none without one), and number
#: at most ``buffer_size + 1`` plus the elements returned since its last (re)start. So a worker
#: holds at most ``max(buffer_size + 1 elements, AHEAD_BYTES + one element)`` ahead. 4 MiB covers
#: the few milliseconds a consumer may go unscheduled while its workers compute on the same cores:
#: with 1 MiB, 2 workers of CPU-bound 256 KiB elements on 2 cores ran at 2,700-4,350 elements/s
#: (workers idle at their bound), with 4 MiB at 4,700-5,400 (benchmarks/bench_ray.py's elements).
AHEAD_BYTES = 4 << 20
#: A restored state names a worker state and the elements to skip after it, which the worker
#: recomputes. Inside a message, the worker marks its state (:class:`Mark`) about this often in
#: production time (estimated from earlier groups), or more often where a state is cheap to take,
#: so a restore recomputes about this much of the worker's work at most.
MAX_REPLAY_SECONDS = 0.001
#: Taking marks costs a worker at most about this share of its production time.
MARK_COST_SHARE = 0.05
#: Where :data:`MAX_REPLAY_SECONDS` of work holds at least this many elements, marks are at least
#: this many elements apart, however cheap a state is: a mark costs a ``get_state()`` and its
#: pickling in the worker and its unpickling in the consumer, and marks closer than the replay
#: bound needs buy a restore nothing it was promised.
MIN_MARK_SPACING = 4
#: A worker sends what it has when its group is this old, before it starts the next element. Each
#: message costs both sides a fixed amount (a pipe write and read, an unpickle, a wake-up of the
#: consumer's I/O thread and, when the consumer waits, of its main thread), taken from the CPUs the
#: workers compute on. Where elements take a fraction of a millisecond, 20 ms (with the 10 ms tick
#: below) rather than 10 ms (and 5) took the CPU time the runtime adds per element from 7.4 to
#: 5.4 us (a CPU-bound map of ~170 us per element on 2 workers and 2 cores; medians of four
#: interleaved runs). The first group after a (re)start still holds one element.
MAX_MESSAGE_SECONDS = 0.02
#: The flusher thread's tick: how long a slow element may hold back the finished elements of its
#: group (about one to two ticks), and how often the main thread looks for commands and the
#: group's age.
FLUSH_SECONDS = 0.01


@dataclasses.dataclass
class _Group:
    """The elements of the message being built: they come ``skip`` elements after ``state``;
    ``marks`` are states taken between them."""

    state: Any
    skip: int
    elements: list[Any]
    marks: list[Mark] = dataclasses.field(default_factory=list)

    def mark(self, state: Any) -> None:
        """Records ``state`` as the state before the next element."""
        if self.elements:
            self.marks.append(Mark(len(self.elements), state))
        else:
            self.state, self.skip = state, 0

    def cut(self, seq: int, generation: int) -> Elements:
        """The elements so far as a message; the group goes on after them."""
        msg = Elements(seq, generation, self.state, self.skip, self.elements, tuple(self.marks))
        n = len(self.elements)
        if self.marks:
            last = self.marks[-1]
            self.state, self.skip = last.state, n - last.offset
        else:
            self.skip += n
        self.elements, self.marks = [], []
        return msg


class WorkerLoop:
    """Runs worker ``index`` of ``job.worker_count``: builds its share's iterator, then answers
    commands until :class:`Stop` (or the consumer goes away). See the module docstring.

    ``run()`` sends :class:`Template` first. After :class:`Start` it produces groups of elements and
    sends each as one :class:`Elements`: a group ends at :data:`MAX_MESSAGE_ELEMENTS`, at
    :data:`MAX_MESSAGE_BYTES` (``size_of`` per element, given by the transport), when it is older
    than :data:`MAX_MESSAGE_SECONDS` before the next element is started, or when the bound below is
    reached.

    The bound: a worker has at most ``job.buffer_size + 1`` elements produced (or being produced)
    and not yet consumed (the one beyond the buffer is sent as soon as it is finished), except that
    it also starts another element while those elements take under :data:`AHEAD_BYTES` bytes
    (``size_of``; not without one) and number at most ``buffer_size + 1`` plus the elements the
    consumer has returned in this generation. Without that allowance, a group that starts while the
    consumer has nothing of this worker's leaves the one beyond the buffer to the next group (the
    buffer's worth goes first).

    ``ahead_bytes`` replaces :data:`AHEAD_BYTES` as that byte allowance for this worker: a
    transport with a high cost per call (Ray) raises it so that one call carries a group of
    elements at a buffer of 1.
    """

    def __init__(
        self,
        job: WorkerJob,
        index: int,
        endpoint: WorkerEndpoint,
        size_of: Callable[[Any], int] | None = None,
        ahead_bytes: int = AHEAD_BYTES,
    ):
        self.job = job
        self.ahead_bytes_limit = ahead_bytes
        self.index = index
        self.endpoint = endpoint
        self.size_of = size_of
        self.seq = 0
        self.it: DatasetIterator | None = None
        self.initial: Any = None
        self.fresh = True
        self.setup_error: BaseException | None = None
        self.setup_tb = ""
        self.elastic_problem: str | None = None
        self.stats_report: Callable[[], Any] | None = None
        self.produced_elements, self.produced_seconds = 0, 0.0
        self.element_seconds = 0.0  # an element's production time in the latest group
        self.state_seconds = 0.0  # what a get_state() costs (at groups' starts, growing slowly)
        self.carried: _Group | None = None  # read by a restart: the first group starts with it
        # generation, produced (sent) and consumed counts in it
        self.gen, self.sent, self.consumed, self.producing = -1, 0, 0, False
        # Messages sent in this generation and not wholly consumed, oldest first: (``sent`` after
        # the message, its bytes), and the sum of those bytes: the elements ahead, in bytes.
        self.ahead_messages: collections.deque[tuple[int, int]] = collections.deque()
        self.ahead_bytes = 0
        self.pending: collections.deque[ToWorker] = collections.deque()
        # Sends happen under this lock: the main thread's and the flusher's (see _flusher).
        self.lock = threading.Lock()
        self.group: _Group | None = None
        # Progress seen by the flusher: next() calls started, and whether one is running.
        self.calls, self.in_next, self.tick = 0, False, False
        self.done = False
        tune_malloc()  # elements made, sent and freed at this worker's rate: no re-faulting
        try:
            import cloudpickle

            ds, init_fn, stats_hook = cloudpickle.loads(job.payload)
            if init_fn is not None:
                init_fn(index, job.worker_count)
            self._build(ds, stats_hook)
        except Exception as e:
            self.setup_error = e
            self.setup_tb = traceback.format_exc()

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _emit(self, make: Callable[[int], FromWorker]) -> None:
        """Numbers and sends a message (under the send lock)."""
        with self.lock:
            self.endpoint.send(make(self._next_seq()))

    def _flusher(self) -> None:
        """Every :data:`FLUSH_SECONDS`: raises ``tick`` (the main thread then checks for
        commands and the group's age, so its loop needs no clock or system call per element), and
        sends the finished elements of the group being built when the main thread has been inside
        the same ``next()`` since the previous tick: a slow element never holds back the elements
        finished before it."""
        seen = -1
        while not self.done:
            time.sleep(FLUSH_SECONDS)
            self.tick = True
            calls = self.calls
            if not self.in_next or calls != seen:
                seen = calls
                continue
            try:
                with self.lock:
                    g = self.group
                    if g is None or not g.elements or not self.in_next or self.calls != calls:
                        continue
                    n = len(g.elements)
                    self.endpoint.send(g.cut(self._next_seq(), self.gen))
                    self.sent += n
            except Exception:  # the consumer is gone: the main thread finds out too
                return

    def _build(self, ds: Any, stats_hook: Any) -> None:
        from grain_core.dataset.sharing import worker_share

        count = self.job.worker_count
        with worker_share(self.index, count, sequential=self.job.sequential_slice) as share:
            if stats_hook is not None:
                it, self.stats_report = stats_hook(ds)
            else:
                it = iter(ds)
        if not share.claimed and count > 1:
            it.close()
            raise ValueError(
                f"Cannot slice `IterDataset` source. mp_prefetch with {count} workers: no "
                "stage of this pipeline can read a "
                "share of its input, so every worker would produce every element. Put a "
                "MapDataset.to_iter_dataset() (or a plugin stage that splits its input, such as "
                "InterleaveIterDataset) upstream of mp_prefetch."
            )
        self.it = it
        self.initial = it.get_state()
        try:
            self.elastic_problem = elastic.chain_problem(it)
        except Exception as e:  # never fail a worker over the elastic analysis
            self.elastic_problem = f"it could not be analysed ({type(e).__name__}: {e})."

    # --- commands ----------------------------------------------------------------------------------

    def _take_commands(self, timeout: float | None) -> bool:
        """Reads commands (waiting up to ``timeout`` for the first); applies ``Consumed`` at once and
        queues the others. Returns whether a non-``Consumed`` command is queued."""
        ep = self.endpoint
        msg = ep.receive(timeout)
        while msg is not None:
            if isinstance(msg, Consumed):
                if msg.generation == self.gen:
                    self.consumed = max(self.consumed, msg.elements)
            else:
                self.pending.append(msg)
            msg = ep.receive(0)
        return bool(self.pending)

    def _command(self, cmd: ToWorker) -> bool:
        """Applies a queued command; False on :class:`Stop`."""
        if isinstance(cmd, Stop):
            return False
        if cmd.generation == self.gen:
            return True  # a repeated command of the current generation
        self.gen, self.sent, self.consumed, self.producing = cmd.generation, 0, 0, False
        self.ahead_messages.clear()
        self.ahead_bytes = 0
        self.carried = None
        if not isinstance(cmd, Start):  # Idle (a Consumed never reaches here)
            return True
        if self.setup_error is not None:
            self._fail(self.setup_error, self.setup_tb)
            return True
        try:
            self._restart(cmd.state, cmd.skip)
        except Exception as e:
            self._fail(e, traceback.format_exc())
            return True
        self.producing = True
        return True

    def _restart(self, state: Any, skip: int) -> None:
        """Moves the iterator to ``skip`` elements after ``state``. The skipped elements are read
        in chunks (a stage may read or skip them at once), together with the element after them,
        which starts the first group (so it needs no second read after a cold restart)."""
        it = self.it
        assert it is not None
        if self.fresh and state is None and skip == 0:
            return
        self.fresh = False
        base = self.initial if state is None else state
        it.set_state(base)
        left = skip
        while left > 0:
            chunk = it.next_chunk(left + 1)
            if len(chunk) > left:
                self.carried = _Group(base, skip, chunk[left:])
                return
            left -= len(chunk)

    def _fail(self, e: BaseException, tb: str) -> None:
        data = pickle_exception(e)
        self._emit(lambda seq: Failure(seq, self.gen, data, tb))

    # --- loop --------------------------------------------------------------------------------------

    def run(self) -> None:
        """Serves commands until :class:`Stop`; returns quietly when the consumer is gone."""
        template = None if self.setup_error is not None else self.initial
        threading.Thread(
            target=self._flusher, name="grain_core-worker-flusher", daemon=True
        ).start()
        try:
            self._emit(lambda seq: Template(seq, template, self.elastic_problem))
            while True:
                if self.pending:
                    if not self._command(self.pending.popleft()):
                        return
                    continue
                # Elements in existence that next() has not returned: ``ahead`` sent plus those
                # of the group being produced, at most buffer_size + 1 (the buffer and the one
                # in production) unless they are small (AHEAD_BYTES). The last one is sent as soon
                # as it is finished, never held back for a credit: it is already counted, and the
                # consumer has it at hand when it returns the one before (no credit round trip
                # per element at a buffer of 1).
                ahead = self.sent - self.consumed
                if not self.producing or (
                    ahead > self.job.buffer_size
                    and (ahead > self.job.buffer_size + self.consumed or self._byte_room() <= 0)
                ):
                    self._take_commands(None)
                    continue
                if self._take_commands(0):
                    continue
                # A group may take the one beyond the buffer too, except when the consumer has
                # nothing of this worker's (it may be waiting: the buffer's worth goes first).
                room = self.job.buffer_size - ahead
                room = room + 1 if ahead else max(1, room)
                self._produce(room, room + self.consumed, self._byte_room())
        except (EOFError, BrokenPipeError, ConnectionResetError):
            pass  # the consumer went away
        finally:
            self.done = True
            self._report()

    def _byte_room(self) -> int:
        """Bytes of elements this worker may still start under :data:`AHEAD_BYTES` (0 without
        ``size_of``), after forgetting the messages the consumer has returned wholly."""
        if self.size_of is None:
            return 0
        done = self.ahead_messages
        while done and done[0][0] <= self.consumed:
            self.ahead_bytes -= done.popleft()[1]
        return self.ahead_bytes_limit - self.ahead_bytes

    def _produce(self, room: int, extra: int, byte_room: int) -> None:
        """Produces and sends one group: ``room`` elements, or up to ``extra`` while they take
        under ``byte_room`` bytes and half the worker's byte allowance."""
        it = self.it
        assert it is not None
        self.fresh = False
        outcome: BaseException | str | None = None
        tb = ""
        t0 = time.perf_counter()
        g, self.carried = self.carried, None
        if g is None:
            g = _Group(it.get_state(), 0, [])
            t, last = time.perf_counter() - t0, self.state_seconds
            self.state_seconds = t if last <= 0 else min(t, 2 * last)  # one slow call: not 1000x
        with self.lock:
            self.group = g
        size_of = self.size_of
        count = len(g.elements)
        nbytes = sum(map(size_of, g.elements)) if size_of is not None else 0
        room = max(room, 0)
        every, replay = self._mark_spacing()
        if byte_room <= 0:
            extra = room
        elif every > replay:  # marks too costly to bound the replay: the group bounds it
            extra = min(extra, replay)
        limit = min(max(room, extra, 1), MAX_MESSAGE_ELEMENTS)
        # A group takes at most half the byte allowance, which frees a message's bytes only once
        # it is returned wholly: the next group is produced while the consumer returns this one
        # (a group taking the whole allowance left the worker waiting for that).
        group_bytes = min(byte_room, self.ahead_bytes_limit // 2)
        next_mark = every
        lock = self.lock
        self.tick = False
        while outcome is None and count < limit:
            if self.tick:
                # Deliver what is finished before starting an element that may be slow, when the
                # group is old; a waiting command (a restart) ends the group too. (An element
                # that turns out slow is covered by the flusher thread.) Checked once per flusher
                # tick, not per element.
                self.tick = False
                if count and (
                    self._take_commands(0) or time.perf_counter() - t0 > MAX_MESSAGE_SECONDS
                ):
                    break
            if count == next_mark:
                st = it.get_state()
                with lock:
                    g.mark(st)
                next_mark += every
            self.calls += 1
            self.in_next = True
            try:
                x = next(it)
            except StopIteration:
                outcome = "end"
                break
            except Exception as e:
                outcome, tb = e, traceback.format_exc()
                break
            finally:
                self.in_next = False
            with lock:
                g.elements.append(x)
            count += 1
            if size_of is not None:
                nbytes += size_of(x)
                if nbytes >= MAX_MESSAGE_BYTES or (count >= room and nbytes >= group_bytes):
                    break
        with self.lock:
            self.group = None
            if g.elements:
                if self.stats_report is not None:  # before the data: read with it, never later
                    self.endpoint.send(Stats(self._next_seq(), self.gen, self.stats_report()))
                n = len(g.elements)
                self.endpoint.send(g.cut(self._next_seq(), self.gen))
                self.sent += n
            if count and size_of is not None:
                # Elements the flusher sent early count from here on, with the rest of the group.
                self.ahead_messages.append((self.sent, nbytes))
                self.ahead_bytes += nbytes
        seconds = time.perf_counter() - t0
        self.produced_elements += count
        self.produced_seconds += seconds
        if count:
            self.element_seconds = seconds / count
        if outcome == "end":
            self._emit(lambda seq: End(seq, self.gen))
            self.producing = False
        elif isinstance(outcome, BaseException):
            self._fail(outcome, tb)
            self.producing = False

    def _mark_spacing(self) -> tuple[int, int]:
        """Elements between marks (their cost under :data:`MARK_COST_SHARE` of the production
        time, as last measured, and at least :data:`MIN_MARK_SPACING` where the replay bound
        allows it), and the elements :data:`MAX_REPLAY_SECONDS` of work hold."""
        e = self.element_seconds
        if e <= 0:
            return 1, MAX_MESSAGE_ELEMENTS
        replay = max(1, int(MAX_REPLAY_SECONDS / e))
        every = max(
            math.ceil(self.state_seconds / (MARK_COST_SHARE * e)), min(replay, MIN_MARK_SPACING), 1
        )
        return every, replay

    def _report(self) -> None:
        if self.job.profiling:
            n, s = self.produced_elements, self.produced_seconds
            _log.warning(
                "mp_prefetch worker %d/%d: %d elements in %.3f s (%.1f us/element)",
                self.index,
                self.job.worker_count,
                n,
                s,
                1e6 * s / max(n, 1),
            )
