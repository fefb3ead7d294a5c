"""``IterDataset.mp_prefetch``: producing a pipeline's elements in worker processes.

Contract (see ``docs/runtime.md``):

* ``num_workers == 0`` iterates the parent in this process (``iter(ds)`` is the parent's iterator).
* With ``K > 0`` workers, worker ``i`` (a ``forkserver`` process by default, ``spawn`` with
  ``GRAIN_CORE_MP_START_METHOD=spawn``; never ``fork``) receives the pipeline serialised with
  cloudpickle, runs ``worker_init_fn(i, K)``, creates the iterator inside
  :func:`grain_core.dataset.sharing.worker_share` ``(i, K)`` (so ``to_iter_dataset`` reads indices
  ``i::K`` and every state is the worker's own from the start; a pipeline with no stage able to
  split its input is refused), and produces elements. The output is round-robin over the workers (worker 0's first element, worker 1's first,
  ...); an exhausted worker is skipped from then on. The order depends only on the pipeline and
  ``K``, never on timing.
* Elements travel in messages of several elements with their numpy buffers in shared memory
  (:mod:`grain_core.runtime.shm`); the consumer copies them out, and the worker reuses the segment
  once that message's credit comes back (or at a new generation).
  A worker has at most ``per_worker_buffer_size + 1`` messages in flight.
* ``get_state()`` is JSON: per worker the state at the start of its current message plus how many of
  its elements were consumed, whether it is exhausted, and whose turn is next. ``set_state`` keeps the
  workers alive and sends them the new position (no process restart). It first compares every worker
  state with the state of that worker's fresh iterator (sent by each worker once it has built it) with
  :func:`grain_core.state.check_same_pipeline`, so a state from another pipeline is refused at once,
  before anything changes.
* Failures: a worker exception is re-raised here (same type when it unpickles, with the worker's
  traceback and the output position in a note, else :class:`WorkerError`); a dead worker raises
  :class:`WorkerError` within ~0.1 s of being noticed; ``close()``, ``with``, garbage collection and
  interpreter exit stop the workers and unlink every shared-memory segment of the iterator.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from grain_core import state as _state
from grain_core.dataset.base import DatasetIterator, IterDataset
from grain_core.options import MultiprocessingOptions
from grain_core.runtime import shm

__all__ = ["MultiprocessPrefetchIterDataset", "MultiprocessPrefetchDatasetIterator", "WorkerError"]

_log = logging.getLogger(__name__)

STATE_KIND = "MultiprocessPrefetchDatasetIterator"
START_METHOD_ENV = "GRAIN_CORE_MP_START_METHOD"
_MAX_MESSAGE_ELEMENTS = 256
_MAX_MESSAGE_SECONDS = 0.005
_MAX_MESSAGE_BYTES = 64 << 20
_POLL_SECONDS = 0.05
_STOP_GRACE_SECONDS = 0.5
_PRELOAD = ("grain_core.runtime.multiprocess", "grain_core.runtime._preload")
_forkserver_lock = threading.Lock()
_PENDING = object()  # a worker's template state not received yet


class WorkerError(RuntimeError):
    """A worker process died, or raised an exception that could not be sent back as itself."""


# --------------------------------------------------------------------------------------------------
# dataset
# --------------------------------------------------------------------------------------------------


def default_multiprocessing_options() -> MultiprocessingOptions:
    """What ``mp_prefetch()`` uses without options: Grain's 10 workers, but never more workers than
    this machine has CPUs."""
    return MultiprocessingOptions(num_workers=min(10, os.cpu_count() or 1))


class MultiprocessPrefetchIterDataset(IterDataset):
    """``parent`` produced by ``options.num_workers`` processes; see the module docstring."""

    def __init__(
        self,
        parent: IterDataset,
        multiprocessing_options: MultiprocessingOptions | None = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
    ):
        if not isinstance(parent, IterDataset):
            raise TypeError(f"mp_prefetch needs an IterDataset parent, got {type(parent).__name__}.")
        if multiprocessing_options is None:
            multiprocessing_options = default_multiprocessing_options()
        if not isinstance(multiprocessing_options, MultiprocessingOptions):
            raise TypeError(
                "multiprocessing_options must be a MultiprocessingOptions, got "
                f"{type(multiprocessing_options).__name__}."
            )
        super().__init__(parent)
        self.multiprocessing_options = multiprocessing_options
        self.worker_init_fn = worker_init_fn

    def __iter__(self) -> DatasetIterator:
        if self.multiprocessing_options.num_workers == 0:
            return iter(self._parents[0])
        return MultiprocessPrefetchDatasetIterator(
            self._parents[0], self.multiprocessing_options, self.worker_init_fn
        )


# --------------------------------------------------------------------------------------------------
# consumer side
# --------------------------------------------------------------------------------------------------


def _context() -> Any:
    method = os.environ.get(START_METHOD_ENV, "forkserver")
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"{START_METHOD_ENV} must be 'forkserver' or 'spawn', got {method!r}.")
    ctx = mp.get_context(method)
    if method == "forkserver":
        from multiprocessing import forkserver

        with _forkserver_lock:
            server = forkserver._forkserver
            if getattr(server, "_forkserver_pid", None) is None:
                mods = [m for m in getattr(server, "_preload_modules", []) if m != "__main__"]
                mods += [m for m in _PRELOAD if m not in mods]
                ctx.set_forkserver_preload(mods)
    return ctx


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Hides ``__main__``'s file and spec while workers start, so that multiprocessing does not
    re-run the user's script (or ``<stdin>``) in every worker: workers never need ``__main__``, since
    cloudpickle sends its functions and classes by value."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    with _forkserver_lock:
        missing = object()
        saved = {k: main.__dict__.get(k, missing) for k in ("__file__", "__spec__")}
        main.__dict__.pop("__file__", None)
        main.__spec__ = None
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is missing:
                    main.__dict__.pop(k, None)
                else:
                    main.__dict__[k] = v


def _shutdown(
    procs: list[Any], conns: list[Any], prefix: str, reader: shm.MessageReader | None = None
) -> None:
    """Stops the workers (stop message, then SIGTERM, then SIGKILL), unmaps and unlinks their
    segments."""
    for c in conns:
        try:
            c.send(("stop",))
        except Exception:
            pass
    for c in conns:
        try:
            c.close()
        except Exception:
            pass
    deadline = time.monotonic() + _STOP_GRACE_SECONDS
    for p in procs:
        try:
            p.join(max(0.0, deadline - time.monotonic()))
        except Exception:
            pass
    for p in procs:
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
    if reader is not None:
        reader.close()
    shm.sweep(prefix)


_checked_modules: dict[tuple[str, str], bool] = {}


def _by_value_ambiguous_modules() -> None:
    """Makes cloudpickle send by value the top-level modules that a worker could not import by name
    as the same file (pytest's several ``conftest`` / rootdir-inserted test modules)."""
    import importlib.util

    import cloudpickle

    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if "." in name or name.startswith("__") or not path or getattr(mod, "__package__", None):
            continue
        key = (name, path)
        if key not in _checked_modules:
            try:
                spec = importlib.util.find_spec(name)
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


def _plugin_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("GRAIN_CORE_")}


class MultiprocessPrefetchDatasetIterator(DatasetIterator):
    """Round-robin over ``num_workers`` worker processes; see the module docstring.

    Worker processes start when the iterator is created; they produce elements from the first
    ``next()`` / ``start_prefetch()`` on, at the position last given by ``set_state``.
    """

    def __init__(
        self,
        parent: IterDataset,
        options: MultiprocessingOptions,
        worker_init_fn: Callable[[int, int], None] | None,
        collect_stats: Callable[[Any], Any] | None = None,
    ):
        super().__init__()
        import cloudpickle

        from grain_core.plugins.registry import get_registry

        k = options.num_workers
        self._k = k
        self._parent_ds = parent
        _by_value_ambiguous_modules()
        payload = cloudpickle.dumps((parent, worker_init_fn))
        self._prefix = shm.new_prefix()
        nslots = options.per_worker_buffer_size + 1
        plugin_modules = get_registry().explicit_module_names()
        ctx = _context()
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._reader = shm.MessageReader()
        # The finalizer holds the lists, not self: GC and interpreter exit stop the workers.
        self._finalizer = weakref.finalize(
            self, _shutdown, self._procs, self._conns, self._prefix, self._reader
        )
        try:
            for i in range(k):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                proc = ctx.Process(
                    target=_worker_main,
                    args=(
                        child_conn,
                        i,
                        k,
                        payload,
                        list(sys.path),
                        _plugin_env(),
                        plugin_modules,
                        f"{self._prefix}w{i}",
                        nslots,
                        options.enable_profiling,
                        collect_stats,
                    ),
                    name=f"grain_core-mp-worker-{i}",
                    daemon=True,
                )
                with _main_hidden():
                    proc.start()
                child_conn.close()
                self._procs.append(proc)
                self._conns.append(parent_conn)
        except BaseException:
            self._finalizer()
            raise
        self._closed = False
        self._gen = 0
        self._started = False
        self._error: BaseException | None = None
        self._queues: list[collections.deque] = [collections.deque() for _ in range(k)]
        self._wstate: list[Any] = [None] * k
        self._wskip = [0] * k
        self._exhausted = [False] * k
        self._next = 0
        self._position = 0
        # Each worker's fresh-iterator state, sent once it has built its iterator: what set_state
        # compares a state's worker entries with (None: unavailable, e.g. the worker failed).
        self._templates: list[Any] = [_PENDING] * k
        # Why elastic restore (another worker count) is undefined, per worker (None: defined).
        self._elastic_problems: list[str | None] = [None] * k
        # grain_core.stats only: each worker's latest "stats" report (None: statistics are off).
        self._worker_stats: list[Any] | None = [None] * k if collect_stats else None

    # --- reading -----------------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self._started:
            return
        self._started = True
        k = self._k
        # The worker whose element comes next is told first.
        for i in [(self._next + j) % k for j in range(k)]:
            conn = self._conns[i]
            if self._exhausted[i]:
                msg: tuple = ("idle", self._gen)
            else:
                msg = ("start", self._gen, self._wstate[i], self._wskip[i])
            try:
                conn.send(msg)
            except (OSError, EOFError):
                pass  # reported as a dead worker when its turn comes

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
            i = self._next
            if self._exhausted[i]:
                if all(self._exhausted):
                    raise StopIteration
                self._next = (i + 1) % k
                continue
            q = self._queues[i]
            if not q:
                self._receive(i)
                continue
            x = q.popleft()
            self._wskip[i] += 1
            self._next = (i + 1) % k
            self._position += 1
            return x

    def _receive(self, i: int) -> None:
        """Reads worker ``i``'s next message of this generation into its queue."""
        while True:
            msg = self._recv(i)
            kind, gen = msg[0], msg[1]
            if kind == "template":
                self._templates[i] = msg[2]
                self._elastic_problems[i] = msg[3]
                continue
            if gen != self._gen:
                continue  # an outdated message: its worker reuses its segment (see shm)
            if kind == "data":
                _, _, wstate, name, payloads, layouts = msg
                try:
                    elements = self._reader.read(name, payloads, layouts)
                finally:
                    try:
                        self._conns[i].send(("credit", gen))
                    except (OSError, EOFError):
                        pass
                self._wstate[i] = wstate
                self._wskip[i] = 0
                self._queues[i].extend(elements)
                return
            if kind == "end":
                self._exhausted[i] = True
                return
            if kind == "error":
                self._error = self._worker_exception(i, msg[2], msg[3])
                raise self._error
            if kind == "stats" and self._worker_stats is not None:  # sent only when collecting
                self._worker_stats[i] = msg[2]
                continue
            raise WorkerError(f"unexpected message {kind!r} from mp_prefetch worker {i}.")

    def _recv(self, i: int) -> tuple:
        conn, proc = self._conns[i], self._procs[i]
        while True:
            if self._closed:
                raise RuntimeError("This iterator was closed while waiting for an element.")
            try:
                if conn.poll(_POLL_SECONDS):
                    return conn.recv()
            except (EOFError, OSError):
                if self._closed:
                    raise RuntimeError(
                        "This iterator was closed while waiting for an element."
                    ) from None
                self._raise_dead(i)
            if not proc.is_alive():
                self._raise_dead(i)

    def _raise_dead(self, i: int) -> None:
        proc = self._procs[i]
        proc.join(1.0)
        code = proc.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"signal {-code}"
        self._error = WorkerError(
            f"mp_prefetch worker {i} (pid {proc.pid}) died unexpectedly ({how}) while the iterator "
            f"waited for output element #{self._position}. It may have been killed (e.g. by the "
            "out-of-memory killer) or crashed in native code. Create a new iterator (or restore a "
            "saved state into one) to continue."
        )
        raise self._error

    def _worker_exception(self, i: int, pickled: bytes | None, tb_text: str) -> BaseException:
        where = (
            f"raised in mp_prefetch worker {i} of {self._k} while producing output element "
            f"#{self._position}"
        )
        exc: BaseException | None = None
        if pickled is not None:
            try:
                import pickle

                exc = pickle.loads(pickled)
            except Exception:
                exc = None
        if isinstance(exc, BaseException):
            exc.add_note(f"{where}. Worker traceback:\n{tb_text}")
            return exc
        return WorkerError(f"Exception {where}. Worker traceback:\n{tb_text}")

    # --- state --------------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        return _state.make_state(
            STATE_KIND,
            num_workers=self._k,
            next_worker=self._next,
            position=self._position,
            workers=[
                {"state": self._wstate[i], "skip": self._wskip[i], "exhausted": self._exhausted[i]}
                for i in range(self._k)
            ],
        )

    def set_state(self, state: dict[str, Any]) -> None:
        if isinstance(state, dict) and (
            state.get("kind") != STATE_KIND or state.get("num_workers") != self._k
        ):
            state = self._elastic_state(state)
        _state.expect_state(
            state, STATE_KIND, ("num_workers", "next_worker", "workers"), num_workers=self._k
        )
        workers = state["workers"]
        nxt = int(state["next_worker"])
        if not isinstance(workers, list) or len(workers) != self._k or not 0 <= nxt < self._k:
            raise _state.StateMismatchError(
                f"The {STATE_KIND!r} state does not describe {self._k} workers: {state!r}"
            )
        for i, w in enumerate(workers):
            if not isinstance(w, dict):
                raise _state.StateMismatchError(f"Malformed worker entry in the state: {w!r}")
            # At most one message's elements are consumed after a worker's last reported state.
            _state.check_state_int(
                w.get("skip"), f"workers[{i}].skip", maximum=_MAX_MESSAGE_ELEMENTS, where=STATE_KIND
            )
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        for i, w in enumerate(workers):
            wstate = w.get("state")
            if wstate is None:
                continue
            template = self._template(i)
            if template is not None:
                _state.check_same_pipeline(template, wstate, where=f"state.workers[{i}].state")
        self._gen += 1
        self._started = False
        self._error = None
        for i, w in enumerate(workers):
            self._queues[i].clear()
            self._wstate[i] = w.get("state")
            self._wskip[i] = int(w["skip"])
            self._exhausted[i] = bool(w.get("exhausted", False))
        self._next = nxt
        self._position = int(state.get("position", 0))

    def _elastic_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """This iterator's state continuing where ``state`` (saved with another worker count, or in
        process) stopped; see :mod:`grain_core.runtime.elastic`. Refuses with the reason."""
        from grain_core.runtime import elastic

        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        saved = state.get("num_workers", 0) if state.get("kind") == STATE_KIND else 0
        what = (
            f"This state was saved with num_workers={saved} (0: in process) and is being restored "
            f"into an mp_prefetch iterator with num_workers={self._k}"
        )
        if state.get("kind") != STATE_KIND:
            try:
                elastic.leaf_state(state)
            except _state.StateMismatchError:
                _state.expect_state(state, STATE_KIND)  # another pipeline: the usual message
                raise
        return elastic.restore_state(state, self._elastic_target(), what)

    def _elastic_target(self) -> Any:
        from grain_core.dataset import PrefetchIterDataset, dataset_tree
        from grain_core.runtime import elastic

        templates = [self._template(i) for i in range(self._k)]
        problem = next((p for p in self._elastic_problems if p is not None), None)
        if problem is None and any(t is None for t in templates):
            problem = "a worker could not build its pipeline (its error is raised at next())."
        leaves = [d for d in dataset_tree(self._parent_ds) if isinstance(d, PrefetchIterDataset)]
        if problem is None and len(leaves) != 1:
            problem = f"the pipeline before mp_prefetch has {len(leaves)} to_iter_dataset stages."
        k = self._k

        def build(g: int) -> dict[str, Any]:
            counts = elastic.split_prefix(g, k)
            return _state.make_state(
                STATE_KIND,
                num_workers=k,
                next_worker=g % k,
                position=g,
                workers=[
                    {"state": elastic.state_at(templates[w], counts[w]), "skip": 0, "exhausted": False}
                    for w in range(k)
                ],
            )

        return elastic.ElasticTarget(
            problem=problem,
            map_ds=leaves[0].map_dataset if leaves else None,
            chain_template=templates[0],
            build=build,
            streams=k,
        )

    def _template(self, i: int) -> Any:
        """Worker ``i``'s fresh-iterator state (its first message), waiting for it if needed; None
        if the worker cannot give one (it failed to build its pipeline, or died: reported later)."""
        if self._templates[i] is _PENDING:
            conn, proc = self._conns[i], self._procs[i]
            try:
                while self._templates[i] is _PENDING and not self._closed:
                    if conn.poll(_POLL_SECONDS):
                        msg = conn.recv()
                        # The template is the first message a worker sends.
                        self._templates[i] = msg[2] if msg[0] == "template" else None
                        if msg[0] == "template":
                            self._elastic_problems[i] = msg[3]
                    elif not proc.is_alive():
                        self._templates[i] = None
            except (EOFError, OSError):
                self._templates[i] = None
        t = self._templates[i]
        return None if t is _PENDING else t

    # --- lifetime -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the workers and releases shared memory. Idempotent; safe from another thread."""
        self._closed = True
        self._finalizer()

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers (for monitoring and tests)."""
        return [p.pid for p in self._procs]


# --------------------------------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------------------------------


def _worker_main(
    conn: Any,
    index: int,
    count: int,
    payload: bytes,
    sys_path: list[str],
    env: dict[str, str],
    plugin_modules: list[str],
    prefix: str,
    nslots: int,
    profiling: bool,
    collect_stats: Callable[[Any], Any] | None = None,
) -> None:
    """Entry point of worker ``index`` of ``count``; returns when stopped or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to handle.
    sys.path[:] = list(sys_path) + [p for p in sys.path if p not in sys_path]
    if _plugin_env() != env:  # the forkserver discovered plugins under another environment
        for k in [k for k in os.environ if k.startswith("GRAIN_CORE_") and k not in env]:
            del os.environ[k]
        os.environ.update(env)
        from grain_core.plugins.registry import get_registry

        get_registry().reload()
    try:
        _WorkerLoop(
            conn, index, count, payload, plugin_modules, prefix, nslots, profiling, collect_stats
        ).run()
    except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
        pass  # the consumer went away
    finally:
        shm.sweep(prefix)
        try:
            conn.close()
        except Exception:
            pass


def _pickle_exception(e: BaseException) -> bytes | None:
    import cloudpickle

    try:
        data = cloudpickle.dumps(e)
        import pickle

        pickle.loads(data)
        return data
    except Exception:
        return None


class _WorkerLoop:
    def __init__(
        self, conn, index, count, payload, plugin_modules, prefix, nslots, profiling, collect_stats
    ):
        self.conn = conn
        self.index, self.count = index, count
        self.nslots = nslots
        self.profiling = profiling
        self.writer = shm.MessageWriter(prefix)
        self.it: DatasetIterator | None = None
        self.initial: Any = None
        self.fresh = True  # the iterator has not produced anything yet
        self.setup_error: BaseException | None = None
        self.elastic_problem: str | None = None
        self.setup_tb = ""
        self.stats = [0, 0.0]  # elements, seconds producing
        self.collect_stats = collect_stats
        self.stats_report: Callable[[], Any] | None = None  # grain_core.stats counters, when on
        try:
            import cloudpickle

            from grain_core.plugins.registry import reimport_explicit

            reimport_explicit(plugin_modules)
            self.ds, init_fn = cloudpickle.loads(payload)
            if init_fn is not None:
                init_fn(index, count)
            self._build()
        except Exception as e:
            self.setup_error = e
            self.setup_tb = traceback.format_exc()

    def _send_error(self, gen: int, e: BaseException, tb: str) -> None:
        self.conn.send(("error", gen, _pickle_exception(e), tb))

    def _build(self) -> None:
        """Builds this worker's iterator (no element is read: kernel iterators start their threads
        at the first element) and records its fresh state, the template ``set_state`` checks."""
        from grain_core.dataset.sharing import worker_share

        with worker_share(self.index, self.count) as share:
            if self.collect_stats:  # grain_core.stats.worker_iterator, passed down by stats
                it, self.stats_report = self.collect_stats(self.ds)
            else:
                it = iter(self.ds)
        if not share.claimed and self.count > 1:
            it.close()
            raise ValueError(
                f"mp_prefetch with {self.count} workers: no stage of this pipeline can read a "
                "share of its input, so every worker would produce every element. Put a "
                "MapDataset.to_iter_dataset() (or a plugin stage that splits its input, such as "
                "InterleaveIterDataset) upstream of mp_prefetch."
            )
        self.it = it
        self.initial = it.get_state()
        from grain_core.runtime.elastic import chain_problem

        try:
            self.elastic_problem = chain_problem(it)
        except Exception as e:  # never fail a worker over the elastic analysis
            self.elastic_problem = f"it could not be analysed ({type(e).__name__}: {e})."

    def _restart(self, state: Any, skip: int) -> None:
        assert self.it is not None
        if self.fresh and state is None and skip == 0:
            return
        self.fresh = False
        self.it.set_state(self.initial if state is None else state)
        for _ in range(skip):
            next(self.it)

    def run(self) -> None:
        conn = self.conn
        conn.send(
            (
                "template",
                -1,
                None if self.setup_error is not None else self.initial,
                self.elastic_problem,
            )
        )
        gen, credits, producing, limit = -1, 0, False, 1
        while True:
            while not producing or credits <= 0 or conn.poll():
                cmd = conn.recv()
                op = cmd[0]
                if op == "stop":
                    self._report()
                    return
                if op == "credit":
                    if cmd[1] == gen:
                        credits += 1
                        self.writer.release_oldest()  # the consumer copied that message out
                    continue
                gen, credits, producing, limit = cmd[1], self.nslots, False, 1
                self.writer.release_all()  # older messages are read or discarded unread
                if op != "start":
                    continue
                if self.setup_error is not None:
                    self._send_error(gen, self.setup_error, self.setup_tb)
                    continue
                try:
                    self._restart(cmd[2], cmd[3])
                except Exception as e:
                    self._send_error(gen, e, traceback.format_exc())
                    continue
                producing = True
            credits -= 1
            producing, limit = self._produce(gen, limit)

    def _produce(self, gen: int, limit: int) -> tuple[bool, int]:
        it, writer = self.it, self.writer
        assert it is not None
        self.fresh = False
        wstate = it.get_state()
        t0 = time.perf_counter()
        outcome: BaseException | str | None = None
        tb = ""
        while len(writer) < limit:
            try:
                x = next(it)
            except StopIteration:
                outcome = "end"
                break
            except Exception as e:
                outcome, tb = e, traceback.format_exc()
                break
            writer.add(x)
            if writer.nbytes >= _MAX_MESSAGE_BYTES or time.perf_counter() - t0 > _MAX_MESSAGE_SECONDS:
                break
            # A waiting command (most often a set_state restart) ends the group early, so a
            # restore never waits for a whole group of the old position to be produced.
            if len(writer) % 8 == 0 and self.conn.poll():
                break
        n = len(writer)
        if n:
            if self.stats_report is not None:  # before the data: read with it, never later
                self.conn.send(("stats", gen, self.stats_report()))
            self.conn.send(("data", gen, wstate, *writer.finish()))
        self.stats[0] += n
        self.stats[1] += time.perf_counter() - t0
        if outcome == "end":
            self.conn.send(("end", gen))
            return False, limit
        if isinstance(outcome, BaseException):
            self._send_error(gen, outcome, tb)
            return False, limit
        return True, min(limit * 2, _MAX_MESSAGE_ELEMENTS)

    def _report(self) -> None:
        if self.profiling:
            n, s = self.stats
            _log.warning(
                "mp_prefetch worker %d/%d: %d elements in %.3f s (%.1f us/element)",
                self.index,
                self.count,
                n,
                s,
                1e6 * s / max(n, 1),
            )
