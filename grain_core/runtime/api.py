"""The runtime API: run worker shares of a pipeline somewhere, consume them round-robin, exactly.

A *runtime* runs ``K`` workers; worker ``i`` builds the pipeline's iterator inside
:func:`grain_core.dataset.sharing.worker_share` ``(i, K)`` and produces its share of the elements.
The consumer takes one element from each worker in turn (worker 0's first element, worker 1's first,
...; an exhausted worker is skipped from then on), so the order depends only on the pipeline and
``K``, never on timing, and its state is exact. This module is the transport-neutral part, public
and documented in ``docs/runtime.md`` and ``docs/writing-plugins.md`` ("Write a runtime"):

* :class:`WorkerLoop` runs one worker share: build the iterator, answer :class:`Start` /
  :class:`Idle` / :class:`Consumed` / :class:`Stop` commands, emit :class:`Elements` (elements with
  the worker's state before the first of them), :class:`End`, :class:`Failure`. It talks to a
  :class:`WorkerEndpoint` (two methods) that a transport provides.
* :class:`RoundRobinConsumer` is the ``DatasetIterator`` the user holds: it keeps the exact state,
  checks a state before changing anything, restores states of other worker counts (elastic restore,
  :mod:`grain_core.runtime.elastic`), and talks to one :class:`Channel` per worker.
* A transport implements :class:`Runtime`: ``start_workers(job)`` starts ``job.worker_count`` workers
  that each call ``WorkerLoop(job, index, endpoint).run()`` after
  :meth:`WorkerEnvironment.apply`, and returns a :class:`WorkerPool` of channels. The built-in
  transport is :class:`grain_core.runtime.processes.ProcessRuntime` (processes + shared memory).
  Runtimes are registered by plugins with the ``register_runtimes`` hook and selected with
  ``mp_prefetch(options, runtime=...)``.

Messages are dataclasses. Every message from the consumer is idempotent (a generation number and
absolute counts), so a transport may deliver one twice, and a consumer interrupted (``Ctrl-C``, or
any exception raised into ``next()``) re-sends it. Every message from a worker carries ``seq``, its
number in that worker's stream, so the consumer applies each one once.

Flow control counts elements, and bytes for small ones: a worker has at most ``buffer_size + 1``
elements produced (or being produced) and not yet returned by the consumer's ``next()``:
``buffer_size`` (``MultiprocessingOptions.per_worker_buffer_size``) finished ones plus the one in
production, which is sent as soon as it is finished; beyond that it starts another element only
while those elements take under :data:`AHEAD_BYTES` (1 MiB) and number at most ``buffer_size + 1``
plus the elements returned since its last (re)start (so read-ahead grows with consumption, and a
restore starts as small as at ``buffer_size``): small elements travel many to a message without a
credit round trip each. The consumer sends a :class:`Consumed` count (a credit)
from ``next()`` as it hands elements out: when it has returned a whole message, when it holds
nothing more of that worker's, and after half a message (or half the buffer, if more) since its
last credit.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import logging
import math
import os
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from grain_core import grain_states as _grain_states
from grain_core import state as _state
from grain_core.dataset.base import DatasetIterator, IterDataset
from grain_core.options import MultiprocessingOptions
from grain_core.runtime import elastic

__all__ = [
    "Channel",
    "Consumed",
    "Elements",
    "End",
    "Failure",
    "Idle",
    "Mark",
    "Position",
    "Runtime",
    "RoundRobinConsumer",
    "Start",
    "Stats",
    "Stop",
    "Template",
    "WorkerEndpoint",
    "WorkerEnvironment",
    "WorkerError",
    "WorkerJob",
    "WorkerLoop",
    "WorkerLostError",
    "WorkerPool",
    "AHEAD_BYTES",
    "STATE_KIND",
    "next_or_rollback",
]

_log = logging.getLogger(__name__)

#: ``kind`` of the consumer's state (unchanged from earlier releases: checkpoints stay readable).
STATE_KIND = elastic.MP_KIND
ENV_PREFIX = "GRAIN_CORE_"
MAX_MESSAGE_ELEMENTS = 256
MAX_MESSAGE_BYTES = 64 << 20
#: Small elements may run further ahead than ``buffer_size + 1``: a worker also starts another
#: element while the elements it has ahead of ``next()`` (sent, or in the group being produced) take
#: under this many bytes, as measured by the transport's ``size_of`` (none without one), and number
#: at most ``buffer_size + 1`` plus the elements returned since its last (re)start. So a worker
#: holds at most ``max(buffer_size + 1 elements, AHEAD_BYTES + one element)`` ahead.
AHEAD_BYTES = 1 << 20
#: A restored state names a worker state and the elements to skip after it, which the worker
#: recomputes. Inside a message, the worker marks its state (:class:`Mark`) about this often in
#: production time (estimated from earlier groups), or more often where a state is cheap to take,
#: so a restore recomputes about this much of the worker's work at most.
MAX_REPLAY_SECONDS = 0.001
#: Taking marks costs a worker at most about this share of its production time.
MARK_COST_SHARE = 0.05
#: A worker sends what it has when its group is this old, before it starts the next element.
MAX_MESSAGE_SECONDS = 0.005
WAIT_SECONDS = 0.05
#: The largest ``skip`` a state may hold: a worker state is taken at least every message, so a
#: state written by ``get_state()`` never skips more.
MAX_SKIP = 1 << 16


class WorkerError(RuntimeError):
    """A worker died, or raised an exception that could not be sent back as itself."""


class WorkerLostError(WorkerError):
    """A worker is gone (killed, crashed, disconnected); raised by :meth:`Channel.peek`."""


# --------------------------------------------------------------------------------------------------
# messages
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Start:
    """Consumer -> worker: produce from ``state`` (None: the fresh iterator) after skipping
    ``skip`` elements, in ``generation``. A repeated ``Start`` of the current generation is ignored."""

    generation: int
    state: Any
    skip: int


@dataclasses.dataclass(frozen=True)
class Idle:
    """Consumer -> worker: the worker is exhausted in ``generation``; wait for a command."""

    generation: int


@dataclasses.dataclass(frozen=True)
class Consumed:
    """Consumer -> worker: the consumer's ``next()`` returned ``elements`` of this worker's elements
    in ``generation`` (an absolute count: re-sending it is harmless)."""

    generation: int
    elements: int


@dataclasses.dataclass(frozen=True)
class Stop:
    """Consumer -> worker: end the worker loop."""


@dataclasses.dataclass(frozen=True)
class Template:
    """Worker -> consumer, first message: the state of the worker's fresh iterator (None: it could
    not be built; the error comes with the first ``Start``) and why elastic restore is undefined
    for it (None: defined)."""

    seq: int
    state: Any
    elastic_problem: str | None


class Position(NamedTuple):
    """A position in a worker's share: ``skip`` elements after the iterator state ``state``."""

    state: Any
    skip: int


class Mark(NamedTuple):
    """A worker state inside a message: ``elements[offset]`` comes right after ``state``."""

    offset: int
    state: Any


@dataclasses.dataclass(frozen=True)
class Elements:
    """Worker -> consumer: ``elements`` in order; the first of them comes ``skip`` elements after
    the worker's iterator state ``state``. ``marks`` (ascending offsets, none at 0) are states the
    worker took between elements, so a position inside the message needs few elements skipped."""

    seq: int
    generation: int
    state: Any
    skip: int
    elements: list[Any]
    marks: tuple[Mark, ...] = ()

    def position_after(self, n: int) -> Position:
        """The position after the first ``n`` elements: from the last mark at or before element
        ``n``, else from ``state``."""
        marks = self.marks
        if marks:
            i = bisect.bisect_right(marks, n, key=_mark_offset)
            if i:
                m = marks[i - 1]
                return Position(m.state, n - m.offset)
        return Position(self.state, self.skip + n)


def _mark_offset(m: Mark) -> int:
    return m.offset


@dataclasses.dataclass(frozen=True)
class End:
    """Worker -> consumer: the worker's share is exhausted in ``generation``."""

    seq: int
    generation: int


@dataclasses.dataclass(frozen=True)
class Failure:
    """Worker -> consumer: producing raised. ``exception`` is the cloudpickled exception when it
    round-trips through pickle (else None); ``traceback`` is the worker's formatted traceback."""

    seq: int
    generation: int
    exception: bytes | None
    traceback: str


@dataclasses.dataclass(frozen=True)
class Stats:
    """Worker -> consumer, only when statistics are collected: the worker's counters, sent just
    before the :class:`Elements` they include."""

    seq: int
    generation: int
    report: Any


ToWorker = Start | Idle | Consumed | Stop
FromWorker = Template | Elements | End | Failure | Stats


# --------------------------------------------------------------------------------------------------
# the worker's environment and job
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerEnvironment:
    """What a worker needs of the consumer's interpreter, captured in the consumer
    (:meth:`capture`) and applied first thing in the worker (:meth:`apply`):

    * ``sys_path``: the consumer's ``sys.path`` exactly. The working directory (``''``) is on it
      only if it was on the consumer's; a helper process started with ``python -c`` must not add it.
    * ``env``: the consumer's ``GRAIN_CORE_*`` environment variables (plugin selection).
    * ``plugin_modules``: modules of plugins registered explicitly with
      ``grain_core.plugins.register`` that are importable by name (in ``sys.modules``); the worker
      imports and registers them. Entry-point plugins are discovered again.
    """

    sys_path: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    plugin_modules: tuple[str, ...]

    @classmethod
    def capture(cls) -> WorkerEnvironment:
        from grain_core.plugins.registry import get_registry

        return cls(
            sys_path=tuple(sys.path),
            env=tuple(sorted(_plugin_env().items())),
            plugin_modules=tuple(
                m for m in get_registry().explicit_module_names() if m in sys.modules
            ),
        )

    def apply(self) -> None:
        """Makes this interpreter's ``sys.path``, ``GRAIN_CORE_*`` variables and plugins the
        consumer's (re-running plugin discovery only when the variables differ)."""
        sys.path[:] = list(self.sys_path)
        env = dict(self.env)
        from grain_core.plugins.registry import get_registry, reimport_explicit

        if _plugin_env() != env:
            for k in [k for k in os.environ if k.startswith(ENV_PREFIX) and k not in env]:
                del os.environ[k]
            os.environ.update(env)
            get_registry().reload()
        reimport_explicit(list(self.plugin_modules))


def _plugin_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}


@dataclasses.dataclass(frozen=True)
class WorkerJob:
    """Everything a worker needs, picklable with plain ``pickle``: the pipeline (and
    ``worker_init_fn`` and the statistics hook) serialised with cloudpickle in ``payload``."""

    payload: bytes
    worker_count: int
    buffer_size: int
    environment: WorkerEnvironment
    profiling: bool = False
    #: Workers read contiguous blocks of the sources (``mp_prefetch(sequential_slice=True)``).
    sequential_slice: bool = False

    @classmethod
    def create(
        cls,
        dataset: IterDataset,
        options: MultiprocessingOptions,
        worker_init_fn: Callable[[int, int], None] | None = None,
        stats_hook: Callable[[Any], tuple[Any, Callable[[], Any]]] | None = None,
        *,
        sequential_slice: bool = False,
    ) -> WorkerJob:
        """``stats_hook(dataset) -> (iterator, report)`` replaces ``iter(dataset)`` in the workers
        when statistics are collected (``grain_core.stats``); ``report()`` is sent before each
        :class:`Elements`."""
        from grain_core.runtime.pickling import dumps_pipeline

        _by_value_ambiguous_modules()
        return cls(
            payload=dumps_pipeline((dataset, worker_init_fn, stats_hook), dataset),
            worker_count=options.num_workers,
            buffer_size=options.per_worker_buffer_size,
            environment=WorkerEnvironment.capture(),
            profiling=options.enable_profiling,
            sequential_slice=sequential_slice,
        )


_checked_modules: dict[tuple[str, str], bool] = {}


def _by_value_ambiguous_modules() -> None:
    """Makes cloudpickle send by value the top-level modules that a worker could not import by name
    as the same file (pytest's several ``conftest`` / rootdir-inserted test modules)."""
    import importlib.machinery

    import cloudpickle

    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if "." in name or name.startswith("__") or not path or getattr(mod, "__package__", None):
            continue
        key = (name, path)
        if key not in _checked_modules:
            try:
                # Searched on the path, as a worker would (find_spec would answer from sys.modules).
                spec = importlib.machinery.PathFinder.find_spec(name, sys.path)
                origin = spec.origin if spec is not None else None
            except (ImportError, ValueError):
                origin = None
            ambiguous = (
                origin is not None
                and os.path.isfile(origin)  # not "frozen" / "built-in"
                and os.path.realpath(origin) != os.path.realpath(path)
            )
            _checked_modules[key] = ambiguous
            if ambiguous:
                try:
                    cloudpickle.register_pickle_by_value(mod)
                except (ValueError, TypeError):
                    pass


# --------------------------------------------------------------------------------------------------
# transport protocols
# --------------------------------------------------------------------------------------------------


class WorkerEndpoint(Protocol):
    """The worker's end of a transport."""

    def send(self, message: FromWorker) -> None:
        """Delivers ``message`` to the consumer, in order. Called from the loop's thread and from
        its flusher thread, never both at once (the loop serialises its sends)."""

    def receive(self, timeout: float | None) -> ToWorker | None:
        """The next command; None when none came within ``timeout`` seconds (``None``: wait).
        Raises ``EOFError`` (or ``OSError``) when the consumer is gone."""


class Channel(Protocol):
    """The consumer's end of one worker's transport. The consumer calls it from one thread."""

    def send(self, message: ToWorker) -> None:
        """Delivers ``message`` to the worker, in order (it may be delivered twice). A
        :class:`Consumed` may overtake earlier messages (the process runtime sends it on a pipe
        of its own): it is absolute, a worker applies only those of its current generation, and
        one of a new generation is only ever sent after the worker answered that generation's
        :class:`Start`."""

    def peek(self, timeout: float) -> FromWorker | None:
        """The oldest message not yet dropped, without removing it; None when none came within
        ``timeout``. Raises :class:`WorkerLostError` (saying how) when the worker is gone and every
        message it sent was dropped."""

    def drop(self) -> None:
        """Removes the message :meth:`peek` returned."""


class WorkerPool(Protocol):
    """Started workers: one channel each."""

    channels: Sequence[Channel]

    def close(self) -> None:
        """Stops the workers and frees what they hold. Idempotent; safe from any thread, from a
        finalizer and at interpreter exit."""


@runtime_checkable
class Runtime(Protocol):
    """A transport: starts ``job.worker_count`` workers; worker ``i`` calls
    ``job.environment.apply()`` then ``WorkerLoop(job, i, endpoint).run()``."""

    def start_workers(self, job: WorkerJob) -> WorkerPool: ...


# --------------------------------------------------------------------------------------------------
# the worker loop
# --------------------------------------------------------------------------------------------------


def pickle_exception(e: BaseException) -> bytes | None:
    """``e`` cloudpickled if it unpickles again, else None."""
    import pickle

    import cloudpickle

    try:
        data = cloudpickle.dumps(e)
        pickle.loads(data)
        return data
    except Exception:
        return None


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
    """

    def __init__(
        self,
        job: WorkerJob,
        index: int,
        endpoint: WorkerEndpoint,
        size_of: Callable[[Any], int] | None = None,
    ):
        self.job = job
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
        """Every :data:`MAX_MESSAGE_SECONDS`: raises ``tick`` (the main thread then checks for
        commands and the group's age, so its loop needs no clock or system call per element), and
        sends the finished elements of the group being built when the main thread has been inside
        the same ``next()`` since the previous tick: a slow element never holds back the elements
        finished before it."""
        seen = -1
        while not self.done:
            time.sleep(MAX_MESSAGE_SECONDS)
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
        threading.Thread(target=self._flusher, name="grain_core-worker-flusher", daemon=True).start()
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
        return AHEAD_BYTES - self.ahead_bytes

    def _produce(self, room: int, extra: int, byte_room: int) -> None:
        """Produces and sends one group: ``room`` elements, or up to ``extra`` while they take
        under ``byte_room`` bytes."""
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
                if nbytes >= MAX_MESSAGE_BYTES or (count >= room and nbytes >= byte_room):
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
        time, as last measured), and the elements :data:`MAX_REPLAY_SECONDS` of work hold."""
        e = self.element_seconds
        if e <= 0:
            return 1, MAX_MESSAGE_ELEMENTS
        every = max(1, math.ceil(self.state_seconds / (MARK_COST_SHARE * e)))
        return every, max(1, int(MAX_REPLAY_SECONDS / e))

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


# --------------------------------------------------------------------------------------------------
# the consumer
# --------------------------------------------------------------------------------------------------


def next_or_rollback(it: Any) -> Any:
    """``next(it)`` for a wrapper that returns the element as it is: when an exception (Ctrl-C) is
    raised into this call after ``it`` returned an element, ``it`` is rolled back so that the next
    ``next()`` returns that element again. ``it`` takes part by having ``rollback_mark()`` and
    ``rollback(mark)`` (:class:`RoundRobinConsumer` and the thread-prefetch iterator do); for any
    other iterator this is ``next(it)``."""
    mark_fn = getattr(it, "rollback_mark", None)
    if mark_fn is None:
        return next(it)
    mark = mark_fn()
    try:
        return next(it)
    except StopIteration:
        raise
    except BaseException:
        it.rollback(mark)
        raise


class _Worker(NamedTuple):
    """The consumer's view of one worker; replaced as a whole, never changed in place."""

    # The position after the elements returned, while ``last`` is None (after a restore, or when
    # the latest element returned ended its message) ...
    state: Any = None
    skip: int = 0
    exhausted: bool = False  # every element returned and End received
    ended: bool = False  # End received (elements may still be buffered)
    buffered: tuple[Elements, ...] = ()
    offset: int = 0  # elements of buffered[0] already returned
    consumed: int = 0  # elements returned in this generation (the Consumed count)
    seq: int = 0  # the last message applied
    failure: Failure | None = None
    # ... else the message of the latest element returned (still buffered: holding it keeps no
    # element alive) and how many of its elements were returned.
    last: Elements | None = None
    taken: int = 0

    def position(self) -> Position:
        """The position after the elements returned."""
        if self.last is None:
            return Position(self.state, self.skip)
        return self.last.position_after(self.taken)


class _Cursor(NamedTuple):
    """Everything ``next()`` changes, replaced by one assignment: an exception raised into
    ``next()`` at any point leaves either the old or the new cursor, never a mix."""

    generation: int
    next_worker: int
    position: int
    workers: tuple[_Worker, ...]


_PENDING = object()


class RoundRobinConsumer(DatasetIterator):
    """Round-robin over the workers of a :class:`WorkerPool`; exact state; elastic restore.

    The workers start producing at the first ``next()`` / ``start_prefetch()``, at the position last
    given by ``set_state``. ``set_state`` keeps the workers and sends them the new position; it first
    compares each worker state with that worker's fresh-iterator state
    (:func:`grain_core.state.check_same_pipeline`), so a state of another pipeline is refused before
    anything changes. A state saved with another worker count (or in process) is converted by
    :func:`grain_core.runtime.elastic.adapt_state` where that is defined.

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
        self._pool = pool
        self._channels = list(pool.channels)
        self._k = k = len(self._channels)
        if k != job.worker_count:
            pool.close()
            raise ValueError(f"the runtime started {k} workers, not {job.worker_count}.")
        self._job = job
        self._parent_ds = parent
        self._closed = False
        self._started = False
        self._error: BaseException | None = None
        self._cursor = _Cursor(0, 0, 0, tuple(_Worker() for _ in range(k)))
        self._prev: _Cursor | None = None  # the cursor before the last element returned
        self._credited = [0] * k
        self._templates: list[Any] = [_PENDING] * k
        self._elastic_problems: list[str | None] = [None] * k
        self._worker_stats: list[Any] | None = [None] * k if collect_stats else None
        self._credit_step = max(1, job.buffer_size // 2)
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

    def __next__(self) -> Any:
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        if self._error is not None:
            raise self._error
        self._ensure_started()
        k = self._k
        while True:
            cur = self._cursor
            i = cur.next_worker
            w = cur.workers[i]
            if w.exhausted:
                if all(x.exhausted for x in cur.workers):
                    raise StopIteration
                self._cursor = cur._replace(next_worker=(i + 1) % k)
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
                nw = _Worker(
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
                )
                ws = cur.workers
                new = _Cursor(
                    cur.generation,
                    i + 1 if i + 1 < k else 0,
                    cur.position + 1,
                    ws[:i] + (nw,) + ws[i + 1 :],
                )
                if (
                    not offset
                    or not rest
                    or consumed - self._credited[i] >= max(self._credit_step, size >> 1)
                ):
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
                self._cursor = _with(cur, i, w._replace(exhausted=True))
                continue
            self._receive(i)

    def next_chunk(self, max_elements: int) -> list[Any]:
        """Up to ``max_elements`` elements in the round-robin order, from what the workers have
        already delivered: waits only when the next element has not arrived (then it is
        ``next()``). The state afterwards is the position after the last element returned, and
        the whole chunk is committed with one assignment (an interrupt leaves all or nothing)."""
        if self._closed or self._error is not None or max_elements <= 1:
            return [self.__next__()]
        self._ensure_started()
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
                i = i + 1 if i + 1 < k else 0
                continue
            q = queues[i]
            if not q:
                w = ws[i]
                if w.ended and w.failure is None:  # End received, every element returned
                    exhausted[i] = True
                    left -= 1
                    i = i + 1 if i + 1 < k else 0
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
            i = i + 1 if i + 1 < k else 0
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
            new_ws[j] = _Worker(
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
            if (
                len(rest) < len(w.buffered)  # a message returned wholly
                or not rest
                or consumed - self._credited[j] >= max(self._credit_step, len(msg.elements) >> 1)
            ):
                self._credit(j, cur.generation, consumed)
        new = _Cursor(cur.generation, i, cur.position + len(out), tuple(new_ws))
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
        """A mark for :meth:`rollback` (see :func:`next_or_rollback`)."""
        return self._cursor

    def rollback(self, mark: Any) -> None:
        """Un-returns the element returned since ``mark``, if exactly one was (its caller was
        interrupted before it got it): the next ``next()`` returns it again."""
        prev = self._prev
        if prev is not None and self._cursor.position == mark.position + 1 == prev.position + 1:
            self._cursor = prev  # the cursor just before that element was taken

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
        self._cursor = _with(cur, i, nw)
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
        cur = self._cursor
        return _state.make_state(
            STATE_KIND,
            num_workers=self._k,
            next_worker=cur.next_worker,
            position=cur.position,
            workers=[_worker_entry(w) for w in cur.workers],
        )

    def set_state(self, state: dict[str, Any]) -> None:
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        if _grain_states.is_grain_mp_state(state):  # saved by Grain's mp_prefetch iterator
            state = _grain_states.from_grain_mp_state(
                state, [self.template(i) for i in range(self._k)]
            )
        state = elastic.adapt_state(self, state)
        _state.expect_state(
            state, STATE_KIND, ("num_workers", "next_worker", "workers"), num_workers=self._k
        )
        workers = state["workers"]
        nxt = state["next_worker"]
        if (
            not isinstance(workers, list)
            or len(workers) != self._k
            or not _state_int(nxt)
            or not 0 <= nxt < self._k
        ):
            raise _state.StateMismatchError(
                f"The {STATE_KIND!r} state does not describe {self._k} workers: {state!r}"
            )
        for i, w in enumerate(workers):
            if isinstance(w, dict):
                _state.check_state_int(
                    w.get("skip"), f"workers[{i}].skip", maximum=MAX_SKIP, where=STATE_KIND
                )
            if not isinstance(w, dict) or not isinstance(w.get("exhausted", False), bool):
                raise _state.StateMismatchError(
                    f"Malformed worker entry in the state: {w!r} (skip must be an int in "
                    f"[0, {MAX_SKIP}], exhausted a bool): it was not written by get_state()."
                )
        position = state.get("position", 0)
        if not _state_int(position) or position < 0:
            raise _state.StateMismatchError(f"Malformed position in the state: {position!r}")
        for i, w in enumerate(workers):
            wstate = w.get("state")
            if wstate is None:
                continue
            template = self.template(i)
            if template is not None:
                _state.check_same_pipeline(template, wstate, where=f"state.workers[{i}].state")
        gen = self._cursor.generation + 1
        views = tuple(
            _Worker(
                state=w.get("state"),
                skip=int(w["skip"]),
                exhausted=bool(w.get("exhausted", False)),
                ended=bool(w.get("exhausted", False)),
            )
            for w in workers
        )
        self._started = False
        self._error = None
        self._credited = [0] * self._k
        self._prev = None
        self._cursor = _Cursor(gen, int(nxt), int(position), views)

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
        """What this iterator offers an elastic restore (hook of :mod:`grain_core.runtime.elastic`)."""
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
        self._finalizer()


def _worker_entry(w: _Worker) -> dict[str, Any]:
    pos = w.position()
    return {"state": pos.state, "skip": pos.skip, "exhausted": w.exhausted}


def _with(cur: _Cursor, i: int, w: _Worker) -> _Cursor:
    return cur._replace(workers=cur.workers[:i] + (w,) + cur.workers[i + 1 :])


def _state_int(v: Any) -> bool:
    import numbers

    return isinstance(v, numbers.Integral) and not isinstance(v, bool)

