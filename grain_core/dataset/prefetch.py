"""``MapDataset.to_iter_dataset``: reading a ``MapDataset`` in order, in chunks, maybe in threads.

Elements are read in chunks of consecutive indices with ``__getitems__`` (so sources read in bulk),
never one element per call. The chunk size adapts to how long chunks take and to how many bytes an
element holds; it changes how work is split, never which elements come out or in what order. The
state is always the index after the last element returned, whatever has been read.

Chunk size and read-ahead are separate. With ``num_threads=0`` or ``prefetch_buffer_size=0``
nothing is read ahead in the background: the caller reads synchronous chunks itself, 1, 2, 4, ...
elements after a (re)start (the first element comes at once), doubling while a chunk takes under
``_SYNC_GROW_SECONDS``, and on while a chunk twice as large costs each element at most
``_SYNC_GAIN`` of what it cost before (a source with a high cost per call, such as ArrayRecord's
reader or a remote source's round trip; see ``ChunkSizes.adapt_sync`` in ``chunk_sizes``), up to
``_MAX_SYNC_CHUNK`` and about ``CHUNK_BYTES`` bytes.

A ``next_chunk(n)`` call whose next chunk the caller reads itself (without threads, or while the
policy below reads inline) gets the ``n`` elements it asks for: the unreturned rest of the current
chunk goes in front of a chunk read for at least the elements still missing (at most
``_MAX_SYNC_CHUNK // source_fan_in`` and about ``CHUNK_BYTES``, whatever the buffer). A stage
reading ahead (a filter, a mix) then gets whole calls, not a short rest at every chunk end. A chunk
larger than the size learnt is read only for elements that call returns, so what is read and not
returned stays within the bounds below.

With threads and a buffer, at most ``prefetch_buffer_size`` elements, and no more than about
``READ_AHEAD_BYTES`` of them once an element's size is known (but at least ``num_threads``), or three
calls of a source's ``bulk_read_size`` (``bulk_reads``), are in flight, counting the unreturned rest of the chunk being
consumed, and each chunk holds at most about ``CHUNK_BYTES``.
Reading ahead queues a chunk only when the buffer has room for all of it, and at most ``2 x
num_threads`` chunks: topping the buffer up by the few elements just consumed would keep every
later chunk that small (a high-latency source would get one index per call). With nothing
queued, the first chunk is cut to the room left (the rest of a chunk read when asked for, up to
the buffer, may leave less than a chunk's worth), so the bound holds after a switch too.
Whether the pool reads *ahead* of the consumer or only the chunk the consumer asks for is chosen by
measuring both, end to end (``read_policy.ReadModePolicy``): reading ahead wins when reads release
the GIL (I/O, large numpy work) or the consumer does; not reading ahead wins when reads are cheap
Python work that threads reading ahead would only slow down by contending for the GIL. The policy
starts without reading ahead. A chunk read when asked for is sized as synchronous chunks (at most
the buffer) and read either *on demand* (one pool thread reads it while the consumer waits) or
*inline* (the consumer reads it itself, as without threads: no hand-off), inline only while the
recent chunks were quick to read (see the slow-element rule below). Chunks read ahead before a
switch are consumed first; reading ahead (re)starts with a ramp, from chunks as large as those
read when asked for. The choice changes who reads when, never which elements come out, in what
order, or the state.

After a (re)start — the first element of a fresh iterator, or the first after ``set_state`` — the
caller reads the first chunk itself (it waits for it anyway; after ``set_state``, further chunks
too, sized as synchronous chunks, until reading them has taken ``_RESTORE_INLINE_SECONDS``); then,
while the policy reads ahead, chunks go to the threads with a ramp (at most 1, 2, 4, ... chunks in
flight, doubling per chunk consumed; the policy's choice is kept across restores): the first
elements do not wait behind a pool of threads competing for the GIL, and a restore followed soon
by another restore (an ``mp_prefetch`` worker reading a few elements per restore) leaves no
threads computing elements nobody will ask for. The ramp reaches the full pool after a handful of
chunks, so steady-state throughput is unchanged. ``start_prefetch()`` skips both (it asks for
reading ahead at once).

A slow element does not hold back finished earlier ones (read ahead or on demand): when the chunk
at the head of the buffer has kept the consumer waiting for ``max(_SLOW_MIN_SECONDS, _SLOW_FACTOR x a typical chunk)``, the
caller reads that chunk's elements itself, one at a time, and hands each out as soon as it is read
(switching back to the thread's result once it is done). A chunk read inline is one
``__getitems__`` call of the consumer, so there a slow element holds back the earlier elements of
its own chunk, as without threads. Chunks are read inline only after
``ReadModePolicy.INLINE_AGAIN_STEPS`` chunks in a row took under ``INLINE_MAX_SECONDS`` (10 ms,
1/25 of ``_SLOW_MIN_SECONDS``) to read, and one that took longer sends the next ones back to the
pool: a slow element holds back at most one chunk of elements read while reads were quick.

A failing read is retried element by element, so the elements before the failing one are delivered
and the error (with a note naming the index) surfaces at the element that caused it.

Reads that are CPU work in their thread use at most the process's CPU share of threads (its CPUs
over the ``mp_prefetch`` workers sharing them), and none (the consumer reads inline) when that
share is one CPU; reads that wait keep all ``num_threads`` (``read_threads``).
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from concurrent import futures
from typing import Any

from grain_core import state as _state
from grain_core import tree
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.bulk_reads import bulk_floor, declared_bulk_size
from grain_core.dataset.chunk_sizes import (  # noqa: F401 (READ_AHEAD_BYTES, _MAX_SYNC_CHUNK: tests)
    _MAX_CHUNK,
    _MAX_SYNC_CHUNK,
    _SLOW_MIN_SECONDS,
    READ_AHEAD_BYTES,
    ChunkSizes,
)
from grain_core.dataset.chunking import source_fan_in
from grain_core.dataset.fast_next import list_serving_next
from grain_core.dataset.filter_ratio import FilterRatioCheck, nones_in
from grain_core.dataset.fingerprints import map_fingerprint, stage_descriptions
from grain_core.dataset.grain_exact_switch import pipeline_for_state
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.lazy_chunk import LazyChunk
from grain_core.dataset.read_policy import ReadModePolicy, ReadStep
from grain_core.dataset.read_threads import ReadVerdict, available_cpus, read_threads
from grain_core.dataset.sequential import contiguous_share
from grain_core.dataset.sharing import (
    claim_worker_share,
    enclosing_worker,
    sequential_worker_share,
)
from grain_core.options import ReadOptions
from grain_core.validation import check_instance

_SLOW_FACTOR = 20  # a head chunk is read element-wise this many times a recent chunk's time late
_RESTORE_INLINE_SECONDS = 0.005  # after set_state the caller reads chunks itself this long
#: Reading ahead is measured (read_policy) only while this many buffers' worth
#: (``ChunkSizes.budget``) or more are left to read, or reads wait (the ``read_threads`` verdict:
#: I/O, which reading ahead always hides): measuring it reads about three buffers' worth in the
#: pool, so in a shorter run of CPU-bound reads (which threads speed up only where they release
#: the GIL) it would be most of what is left, and could not pay for itself.
EXPLORE_LEFT = 8


class PrefetchIterDataset(IterDataset):
    """A ``MapDataset`` read in index order, skipping ``None`` unless ``allow_nones``."""

    def __init__(self, parent: MapDataset, *, read_options: ReadOptions | None = None, allow_nones=False):
        check_instance(parent, MapDataset, "to_iter_dataset", verb="needs")
        if read_options is None:
            read_options = ReadOptions()
        check_instance(read_options, ReadOptions, "read_options")
        super().__init__(parent)
        self._map_ds = parent
        self.read_options = read_options
        self.allow_nones = bool(allow_nones)

    @property
    def map_dataset(self) -> MapDataset:
        """The ``MapDataset`` this stage reads."""
        return self._map_ds

    def __iter__(self) -> PrefetchDatasetIterator:
        it = PrefetchDatasetIterator(self._map_ds, self.read_options, self.allow_nones)
        share = claim_worker_share()
        if share is not None and sequential_worker_share():
            if share[1] > 1:  # one worker reads everything, as in Grain
                it.set_dataset(contiguous_share(self._map_ds, *share))
        elif share is not None:
            it.set_slice(slice(share[0], None, share[1]))
        return it


class PrefetchDatasetIterator(DatasetIterator):
    """Iterates a ``MapDataset`` in index order. Its state is the next index to read.

    Created inside :func:`grain_core.dataset.sharing.worker_share` (an ``mp_prefetch`` worker), it
    reads every ``count``-th index from the worker's ``index`` (see :meth:`set_slice`).
    """

    can_unread = True  # see unread

    def __init__(self, ds: MapDataset, read_options: ReadOptions, allow_nones: bool):
        super().__init__()
        self._full_ds, self._read_options, self._allow_nones = ds, read_options, allow_nones
        # No background read-ahead without threads or without a buffer: synchronous chunks.
        self._sync = not (read_options.num_threads and read_options.prefetch_buffer_size)
        self._filter_check = FilterRatioCheck("to_iter_dataset")
        self._sizes = ChunkSizes(read_options, self._sync)  # chunk sizes and limits
        # With threads: whether the pool reads ahead or only the chunk asked for (see
        # read_policy). A private hook: tests replace it with a policy of scripted decisions.
        self._policy = ReadModePolicy()
        # Whether reads are CPU work (read_threads; a private hook, tests fix it), and the
        # processes sharing this one's CPUs (mp_prefetch workers).
        self._verdict = ReadVerdict()
        worker = enclosing_worker()
        self._workers, self._cpus = (1 if worker is None else worker[1]), available_cpus()
        self._pool_threads = 0
        self._configure(ds)
        self._lock = threading.Lock()
        self._pool: futures.ThreadPoolExecutor | None = None
        self._closed = False

    def _configure(self, ds: MapDataset, built: MapDataset | None = None) -> None:
        self._ds = ds
        self._built = ds if built is None else built  # ds unless switched to Grain's data
        self._len, self._bulk = len(ds), declared_bulk_size(ds)
        self._fingerprint, self._sizes.fan_in = map_fingerprint(ds), source_fan_in(ds)
        self._stages = stage_descriptions(ds)
        self._next_index = 0
        self._reset_buffer()

    def _reset_buffer(self) -> None:
        """Forgets everything read ahead and restarts cold at ``_next_index`` (see the docstring)."""
        self._sizes.reset()
        self._step_from: float | None = None  # when the current chunk was made current
        # Chunks read ahead from this index on are measured (None: not reading ahead now): once
        # the pool has read a buffer's worth since it started reading ahead (before, the consumer
        # waits for a pool still filling up, whose threads may still be opening files).
        self._settle_at: int | None = None
        self._restart_ahead = False  # read on demand since: reading ahead restarts with a ramp
        self._cold = True  # the next chunk is read by the caller
        self._cold_left = 0.0  # ... and after it, more chunks while reading them took under this
        self._ramp: int | None = 1  # chunks allowed in flight in the pool (None: no limit)
        self._last_done: float | None = None
        # (start, stop, future or None: read by the caller, read ahead: not asked for yet)
        self._buffer: collections.deque[tuple[int, int, Any, bool]] = collections.deque()
        self._read_to = self._next_index
        self._current: Any = []
        self._serve_stop = 0  # __next__ serves _current below this before the guard (see there)
        self._current_start = self._next_index
        self._current_pos = 0
        self._current_dense = True  # the current chunk holds no None (slices need no filtering)
        self._taken_from = 0  # _current_pos before the latest next_chunk (see unread)

    def set_slice(self, sl: slice) -> None:
        """Restricts this iterator to ``ds[sl]``; only valid before the first element is read."""
        self.set_dataset(self._full_ds.slice(sl))

    def set_dataset(self, ds: MapDataset) -> None:
        """Reads ``ds`` (a share of the dataset, e.g. a worker's sequential slice) instead; only
        valid before the first element is read."""
        self._cancel_pending()
        self._configure(ds)

    # --- reading ----------------------------------------------------------------------------------

    def _read_chunk(
        self, start: int, stop: int, cpu: bool = False
    ) -> tuple[list[Any], float, float, float | None]:
        """The chunk, the seconds reading it took, when it was done and (with ``cpu``) the
        reading thread's CPU seconds."""
        t0 = time.perf_counter()
        c0 = time.thread_time() if cpu else 0.0
        items = self._ds.__getitems__(range(start, stop))
        t1 = time.perf_counter()
        return items, t1 - t0, t1, (time.thread_time() - c0 if cpu else None)

    def _near_end(self) -> bool:
        """Whether fewer than ``EXPLORE_LEFT`` buffers' worth are left to read (with threads)."""
        return not self._sync and self._len - self._read_to < EXPLORE_LEFT * self._sizes.budget()

    def _reads_ahead(self) -> bool:
        """Whether chunks go to the pool ahead of the consumer: with threads and a buffer, after
        the first chunk of a (re)start, while the policy finds reading ahead faster."""
        return not (self._sync or self._cold) and self._policy.read_ahead and self._threads() > 0

    def _threads(self) -> int:
        """Read threads now: ``num_threads``, fewer while reads are CPU work (read_threads)."""
        n, cpu = self._read_options.num_threads, self._verdict.cpu_bound
        return read_threads(n, cpu, self._workers, self._cpus)

    def _submit(self, start: int, stop: int, cpu: bool = False) -> futures.Future:
        threads = max(self._threads(), 1)
        if self._pool is not None and self._pool_threads != threads:
            self._pool.shutdown(wait=False)  # its reads still run: their futures are queued
            self._pool = None
        if self._pool is None:
            self._pool_threads = threads
            self._pool = futures.ThreadPoolExecutor(
                max_workers=threads, thread_name_prefix="grain_core-read"
            )
        return self._pool.submit(self._read_chunk, start, stop, cpu)

    def _fill(self, want: int = 0) -> None:
        """Queues chunks: reading ahead, submits chunks to the pool until
        ``prefetch_buffer_size`` elements are in flight, counting the unreturned rest of the
        current chunk; otherwise queues the one chunk the consumer asks for next (once the chunks
        read ahead before are consumed): read by the caller without threads or after a
        (re)start, else by a pool thread while the caller waits (so a slow element still does not
        hold back finished ones). A chunk the caller reads holds at least the ``want`` elements
        a ``next_chunk`` call still misses, up to ``ChunkSizes.limit(False, asked=True)``."""
        budget = self._sizes.budget()
        ahead = self._reads_ahead()
        in_flight = len(self._current) - self._current_pos
        in_flight += sum(stop - start for start, stop, _, _ in self._buffer)
        while self._read_to < self._len and (in_flight < budget or not self._buffer):
            start = self._read_to
            if not ahead:
                if not self._buffer:
                    inline = self._sync or self._cold or self._policy.inline
                    inline = inline or not self._threads()
                    size = self._sizes.sync_chunk
                    if inline and want > size:
                        size = max(size, min(want, self._sizes.limit(False, asked=True)))
                    stop = min(self._len, start + size)
                    fut = None if inline else self._submit(start, stop, True)
                    # `+=` and an assignment, no call between: an interrupt cannot queue the
                    # range without moving `_read_to` past it.
                    self._buffer += ((start, stop, fut, False),)
                    self._read_to = stop
                break
            if self._settle_at is None:
                self._settle_at = start + budget
                if self._restart_ahead:  # a ramp, from chunks as large as those read when asked for
                    self._sizes.chunk = min(self._sizes.sync_chunk, self._sizes.limit(True))
                    self._ramp, self._restart_ahead = 1, False
            if self._ramp is not None and len(self._buffer) >= self._ramp:
                break
            if len(self._buffer) >= 2 * self._threads():
                break  # more would only queue: later chunks get the size learnt meanwhile
            stop = min(self._len, start + self._sizes.chunk)
            if budget - in_flight < stop - start:
                if self._buffer or in_flight >= budget:
                    break  # room for a whole chunk only (see the module docstring)
                # Nothing queued and the current chunk's rest leaves less room than a chunk (a
                # chunk read when asked for can fill the buffer): a chunk the room holds.
                stop = start + budget - in_flight
            fut = self._submit(start, stop)
            self._buffer += ((start, stop, fut, True),)  # with the next line: no call between
            self._read_to = stop
            in_flight += stop - start

    def _slow_after(self) -> float:
        return max(_SLOW_MIN_SECONDS, _SLOW_FACTOR * self._sizes.typical_seconds)

    def _next_chunk(self, carry: list[Any] | None = None, want: int = 0) -> bool:
        """Makes the next chunk current; False at the end. An exception (even a
        ``KeyboardInterrupt`` while waiting) leaves the iterator as it was. ``carry``: the
        unreturned rest of the current chunk (a list), kept in front of the next chunk, which is
        then read by the caller; if that read fails, nothing changes and False is returned (the
        rest is served first, the failing chunk read again after it). ``want``: see ``_fill``."""
        if self._closed:
            raise RuntimeError("This iterator was closed; create a new one with iter(dataset).")
        if not self._buffer:
            self._fill(want)
            if not self._buffer:
                return False
        start, stop, fut, ahead = self._buffer[0]
        items: Any
        lazy = False
        waited: float | None = None  # how long reading it took (None: unknown, it failed)
        # The pool's chunk size learns from chunks read ahead and from the first chunk of a
        # (re)start (read by the caller); chunks read on demand leave it alone.
        sizes_pool = ahead or (fut is None and self._cold and not self._sync)
        near = self._near_end()
        try:
            if fut is None:
                items, seconds, done, used = self._read_chunk(start, stop, not self._sync)
            else:
                try:
                    items, seconds, done, used = fut.result(timeout=self._slow_after())
                except futures.TimeoutError:
                    # A slow element: hand out what can be read without waiting for it.
                    items, lazy = LazyChunk(self._ds, start, stop, fut), True
                    seconds = done = 0.0
                    waited = self._slow_after()
            if not lazy:
                waited = seconds
                if used is not None:  # a read that ran alone (read_threads)
                    self._verdict.record(used, seconds)
            if not lazy and sizes_pool:
                last, self._last_done = self._last_done, done
                pool_seconds = seconds if last is None else min(seconds, max(done - last, 0.0))
        except Exception:
            # Re-read one by one so the elements before the failing one are still delivered and
            # the error surfaces at the element that caused it.
            items, lazy = LazyChunk(self._ds, start, stop), True
        dense = True
        if not lazy:
            if items:
                self._sizes.elem_bytes = tree.nbytes(items[0]) or self._sizes.elem_bytes
                # a bulk source's floor, threads or not, in elements: an element reads up to
                # ``fan_in`` source indices (a batch), the declaration counts source indices
                per_call = -(-self._bulk // self._sizes.fan_in)
                cap = self._sizes.count_cap()
                self._sizes.floor = bulk_floor(per_call, max(self._sizes.elem_bytes, 1), cap)
            if sizes_pool:
                self._sizes.adapt(seconds, pool_seconds, len(items))
            if not ahead:
                self._sizes.adapt_sync(seconds, len(items))
            if not self._allow_nones:
                dense = not self._filter_check.record_chunk(
                    len(items), nones_in(items), self._options
                )
        else:
            dense = self._allow_nones
        kept = 0
        if carry is not None:
            if lazy:
                return False
            kept, dense = len(carry), dense and self._current_dense
            items = carry + items
        consumed = len(self._current) - kept  # the previous chunk, consumed up to `carry`
        serve = len(items) if dense and not lazy and type(items) is list else 0  # see __next__
        # The commit: plain assignments and a `del` (no call, so no KeyboardInterrupt between
        # them): the chunk moves from the buffer to `_current` at once or not at all.
        self._current, self._current_start, self._current_pos = items, start - kept, 0
        self._current_dense, self._serve_stop = dense, serve
        self._taken_from = 0
        del self._buffer[0]
        if self._sync:
            return True
        if ahead and self._ramp is not None:
            self._ramp *= 2
            if self._ramp > 2 * max(self._threads(), 1):
                self._ramp = None
        now = time.perf_counter()
        last, self._step_from = self._step_from, now
        settled = not ahead or (self._settle_at is not None and start >= self._settle_at)
        measured = last is not None and consumed
        read_seconds = None if ahead else waited
        self._policy.record(
            ReadStep(
                ahead,
                consumed if measured else 0,
                now - last if measured and last is not None else 0.0,
                settled,
                read_seconds,
                self._verdict.cpu_bound is False or not near,  # reads wait: see EXPLORE_LEFT
            )
        )
        if not self._policy.read_ahead or not self._threads():
            self._settle_at, self._restart_ahead = None, True
        if fut is None and self._cold:
            # a failed read (time unknown) ends the caller's reading
            self._cold_left = 0.0 if waited is None else self._cold_left - waited
            if self._cold_left <= 0:
                self._cold = False  # the pool starts at the next chunk, after this one is handed out
        elif self._policy.read_ahead:
            self._fill()
        return True

    def _next_full(self):
        while True:
            cur = self._current
            pos = self._current_pos
            n = len(cur)
            if self._allow_nones:
                if pos < n:
                    x = cur[pos]
                    self._current_pos = pos + 1
                    return x
            else:
                while pos < n:
                    x = cur[pos]
                    pos += 1
                    if x is not None:
                        # Where the run without None from here ends (served before the guard);
                        # found once per run of a list chunk with Nones.
                        stop = self._serve_stop
                        if stop < pos and not self._current_dense and type(cur) is list:
                            stop = pos
                            while stop < n and cur[stop] is not None:
                                stop += 1
                        self._current_pos, self._serve_stop = pos, stop  # stores only: the commit
                        return x
                self._current_pos = pos
            if not self._next_chunk():
                raise StopIteration

    # Served before the thread guard while the current chunk is a list, below ``_serve_stop``: its
    # length when it holds no element to skip, else where the run without ``None`` that the full
    # next() last served from ends (0 for a lazy chunk): fast_next.list_serving_next.
    __next__ = list_serving_next("_current", "_current_pos", _next_full, "_serve_stop")

    def next_chunk(self, max_elements: int) -> list[Any]:
        while True:
            cur = self._current
            pos = self._current_pos
            n = len(cur)
            if pos < n:
                if isinstance(cur, LazyChunk):
                    x = cur[pos]
                    self._taken_from, self._current_pos = pos, pos + 1
                    if x is None and not self._allow_nones:
                        continue
                    return [x]
                stop = min(n, pos + max_elements)
                if stop - pos < max_elements and self._caller_reads_next():
                    # Serve all the elements asked for: the rest of this chunk in front of the next
                    # one, read now by the caller for the elements still missing.
                    if self._next_chunk(cur[pos:], max_elements - (n - pos)):
                        continue
                out = cur[pos:stop]
                if not self._current_dense:
                    out = [x for x in out if x is not None]
                self._taken_from, self._current_pos = pos, stop  # the commit
                if out:
                    return out
                continue
            if self._cold and not self._buffer and max_elements > self._sizes.sync_chunk:
                # After a (re)start the caller reads the first chunk itself: as many elements as
                # it asks for now (a worker skipping to a restored position, a batch), not one.
                self._sizes.sync_chunk = min(max_elements, self._sizes.limit(False))
            if not self._next_chunk(None, max_elements):
                raise StopIteration

    def _caller_reads_next(self) -> bool:
        """Whether the next chunk is read by the caller when asked for (nothing read ahead)."""
        if self._buffer or self._read_to >= self._len:
            return False
        inline = self._policy.inline or not self._threads()
        return self._sync or self._cold or (inline and not self._reads_ahead())

    def unread(self, count: int) -> None:
        """Moves back over the last ``count`` elements the latest ``next_chunk`` returned."""
        if count <= 0:
            return
        if self._current_dense:
            self._current_pos -= count
            return
        cur, pos = self._current, self._current_pos
        while count:
            pos -= 1
            if cur[pos] is not None:
                count -= 1
        self._current_pos, self._serve_stop = pos, 0  # (the next next() finds its run again)

    # --- state ------------------------------------------------------------------------------------

    def _position(self) -> int:
        return self._current_start + self._current_pos

    def get_state(self) -> dict[str, Any]:
        return _state.make_state(
            "PrefetchDatasetIterator",
            fingerprint=self._fingerprint,
            length=self._len if self._len < sys.maxsize else -1,
            next_index=self._position(),
            stages=self._stages,
            **({} if self._ds is self._built else {"from_grain": True}),
        )

    def set_state(self, state: dict[str, Any]) -> None:
        # A state continuing google grain's switches to Grain-exact data (grain_exact_switch).
        switch = pipeline_for_state(state, self._ds, self._built, self._fingerprint)
        fingerprint, stages = (self._fingerprint, self._stages) if switch is None else (
            switch.fingerprint, stage_descriptions(switch.ds))
        state = state if switch is None else switch.state
        _state.check_fingerprint(state, "to_iter_dataset", fingerprint, stages)
        _state.expect_state(state, "PrefetchDatasetIterator", ("next_index",), fingerprint=fingerprint)
        index = int(state["next_index"])
        if index < 0 or index > self._len:
            raise _state.StateOutOfRangeError(
                f"Checkpoint `next_index` {index} is out of range for dataset of length "
                f"{self._len}. The state comes from another (longer) pipeline or was altered."
            )
        self._cancel_pending()
        if switch is not None:
            self._configure(switch.ds, self._built)
        self._next_index = index
        self._reset_buffer()  # restart cold: the first element after a restore comes quickly
        self._cold_left = _RESTORE_INLINE_SECONDS

    def start_prefetch(self) -> None:
        if not self._sync and not self._buffer and not self._closed:
            # Asked to read ahead now, before the first element is wanted: fill the pool at once
            # (the policy starts with the pool and measures the calling thread afterwards).
            self._policy.start_reading_ahead()
            if self._policy.read_ahead:
                self._cold = False
                self._ramp = None
                self._fill()

    def _cancel_pending(self) -> None:
        for _, _, fut, _ in self._buffer:
            if fut is not None:
                fut.cancel()
        self._buffer.clear()

    def buffer_fill(self) -> float | None:
        """The elements of the chunks read ahead (in flight or ready) over ``prefetch_buffer_size``;
        ``None`` without threads or buffer (statistics hook)."""
        if self._sync:
            return None
        n = sum(stop - start for start, stop, _, _ in tuple(self._buffer))
        return min(1.0, n / max(int(self._read_options.prefetch_buffer_size), 1))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cancel_pending()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
