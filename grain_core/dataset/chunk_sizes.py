"""How ``to_iter_dataset`` sizes its chunks from how long recent ones took (``ChunkSizes``, the
chunk-size state a ``prefetch.PrefetchDatasetIterator`` owns): chunks read when asked for
(``adapt_sync``) and chunks the thread pool reads ahead (``adapt``). Sizes change how work is
split, never which elements come out, in what order, or the state (see the ``prefetch`` module
docstring)."""

from __future__ import annotations

from grain_core.dataset.chunking import CHUNK_BYTES
from grain_core.options import ReadOptions

_MAX_CHUNK = 1024
_MAX_SYNC_CHUNK = 16384  # without threads (a shuffle's cipher costs per call: spread over more)
#: With threads, the elements read ahead take about this many bytes at most once an element's size
#: is known (``prefetch_buffer_size`` counts elements: 500 batches of 3 MiB would be 1.5 GB), yet
#: never fewer elements than threads (each thread still gets one).
READ_AHEAD_BYTES = 32 << 20
_MIN_CHUNK_SECONDS = 0.002
_MAX_CHUNK_SECONDS = 0.02
_POOL_GROW_SECONDS = 0.005  # grow chunks (up to one thread's share) while they cost the pool less
_SYNC_GROW_SECONDS = 0.002  # synchronous chunks double while reading one takes less than this
_SYNC_GAIN = 0.9  # ... or while doubling them cut the cost per element to at most this share
_SLOW_MIN_SECONDS = 0.25  # a head chunk this late (at least) is read by the caller element-wise


class ChunkSizes:
    """The chunk sizes of one ``PrefetchDatasetIterator`` (which owns it) and the rules that change
    them: what the iterator measures goes in (``elem_bytes``, ``floor``, ``fan_in``, the
    ``adapt*`` calls), the next chunks' sizes and limits come out."""

    def __init__(self, read_options: ReadOptions, sync: bool):
        self.read_options = read_options
        self.sync = sync  # no read-ahead (no threads or no buffer)
        self.fan_in = 1  # source elements one element reads at most (chunking.source_fan_in)
        self.elem_bytes = 0  # bytes of a recent element (0: unknown)
        self.floor = 0  # a bulk source's floor (bulk_reads)
        self.typical_seconds = 0.0  # how long a chunk recently took
        self.reset()

    def reset(self) -> None:
        """Sizes restart at one element (a (re)start, see the ``prefetch`` docstring)."""
        self.chunk = 1  # elements of the next chunk read ahead by the pool
        self.sync_chunk = 1  # elements of the next chunk read when asked for (no read-ahead)
        # Seconds per element of the last chunk read when asked for, at each size (adapt_sync) ...
        self.sync_cost: dict[int, float] = {}
        self.pool_cost: dict[int, float] = {}  # ... and of the last pool chunk (adapt)

    def limit(self, ahead: bool, asked: bool = False) -> int:
        """The most elements a chunk may hold: ``_MAX_SYNC_CHUNK // source_fan_in`` (with threads
        ``_MAX_CHUNK``, or a bulk source's larger floor), about ``CHUNK_BYTES`` bytes and, with
        threads, the buffer (a chunk read when asked for) or half of it (a chunk read ahead, so
        reading ahead overlaps consuming; the buffer holds at least three floors).
        ``asked``: a chunk the caller reads for the elements a ``next_chunk(n)`` asks for (see
        ``next_chunk``): ``_MAX_SYNC_CHUNK // source_fan_in`` and ``CHUNK_BYTES`` only."""
        sync = self.sync or asked
        limit = self.count_cap() if sync else max(_MAX_CHUNK, self.floor)
        if self.elem_bytes:
            limit = min(limit, max(1, CHUNK_BYTES // self.elem_bytes))
        if not sync:
            budget = self.budget()
            limit = min(limit, max(1, budget // 2 if ahead else budget))
        return limit

    def count_cap(self) -> int:
        """The most elements a chunk read without threads holds by count: ``_MAX_SYNC_CHUNK``
        source indices, ``source_fan_in`` of them per element."""
        return max(1, _MAX_SYNC_CHUNK // self.fan_in)

    def budget(self) -> int:
        """The most elements in flight with threads: ``prefetch_buffer_size``, or fewer once an
        element's size is known, about ``READ_AHEAD_BYTES`` (at least ``num_threads``); and at
        least three calls of a bulk source's floor: one consumed, two in flight (bulk_reads)."""
        size = self.read_options.prefetch_buffer_size
        if self.elem_bytes:
            by_bytes = max(self.read_options.num_threads, READ_AHEAD_BYTES // self.elem_bytes)
            size = min(size, by_bytes)
        return max(size, 3 * self.floor)

    def adapt_sync(self, seconds: float, elements: int) -> None:
        """Resizes chunks read when asked for from the last one (``elements`` read in ``seconds``).

        Doubling while one takes under ``_SYNC_GROW_SECONDS``; past that, a size whose double was
        never read is tried once, and chunks keep doubling while the last doubling cut the cost
        per element to ``_SYNC_GAIN`` of the half size's or less (bulk reads with a high cost per
        call, such as ArrayRecord's reader or a remote source's round trip, grow to where that
        cost is spread). With threads, growing stops and halving starts at ``4 x
        _SYNC_GROW_SECONDS`` (a chunk read when asked for stays quick enough to be read inline),
        unless doubling gained (or was never tried): a high-latency source (remote reads) gets
        indices in bulk. Trying or gaining grows a chunk only while one takes under
        ``_SLOW_MIN_SECONDS`` (a CPU-bound map's chunks settle near ``_MAX_CHUNK_SECONDS``)."""
        limit = self.limit(False)
        longest = _MAX_CHUNK_SECONDS if self.sync else 4 * _SYNC_GROW_SECONDS
        cost = seconds / max(elements, 1)
        self.sync_cost[elements] = cost
        half = self.sync_cost.get(elements // 2)
        gained = half is not None and cost <= _SYNC_GAIN * half
        explore = 2 * elements not in self.sync_cost
        if seconds < _SYNC_GROW_SECONDS or ((gained or explore) and seconds < _SLOW_MIN_SECONDS):
            self.sync_chunk = min(self.sync_chunk * 2, limit)
        elif seconds > longest:
            self.sync_chunk = max(1, min(self.sync_chunk // 2, limit))
        else:
            self.sync_chunk = min(self.sync_chunk, limit)
        self.sync_chunk = max(self.sync_chunk, min(self.floor, limit))  # a bulk source's floor

    def adapt(self, seconds: float, pool_seconds: float, elements: int) -> None:
        """Resizes pool chunks from how long the last one (``elements`` elements) took on its own
        (``seconds``) and what it cost the thread pool (``pool_seconds``: at most the time since
        the chunk before it was done).

        Threads sharing the CPU (and the GIL) make every chunk take longer the more run at once, so
        ``seconds`` overstates what a chunk costs when threads contend; ``pool_seconds`` does not.
        Chunks grow past ``prefetch_buffer_size // num_threads`` only when they are fast on their
        own, so slow (e.g. I/O-bound) reads still keep every thread busy; bulk readers with a high
        cost per call (ArrayRecord) get calls as large as one thread's share of the buffer. Chunks
        whose cost per element fell to ``_SYNC_GAIN`` or less of the half size's (a high-latency
        source, e.g. a remote reader) keep doubling up to the chunk limit, and do not halve."""
        limit = self.limit(True)
        self.typical_seconds = seconds
        budget = self.read_options.prefetch_buffer_size
        cost = seconds / max(elements, 1)
        self.pool_cost[elements] = cost
        smaller = [k for k in self.pool_cost if elements // 2 <= k < elements]  # <= limit keys
        half = self.pool_cost[max(smaller)] if smaller else None
        gained = half is not None and cost <= _SYNC_GAIN * half
        if seconds < _MIN_CHUNK_SECONDS:
            self.chunk = min(self.chunk * 2, limit)
        elif pool_seconds < _POOL_GROW_SECONDS:
            per_thread = min(limit, budget // max(self.read_options.num_threads, 1))
            self.chunk = min(self.chunk * 2, max(self.chunk, per_thread), limit)
        elif gained and elements >= self.chunk:
            self.chunk = min(self.chunk * 2, limit)
        elif pool_seconds > _MAX_CHUNK_SECONDS and not gained:
            self.chunk = max(1, self.chunk // 2)
        else:
            self.chunk = min(self.chunk, limit)
        self.chunk = max(self.chunk, min(self.floor, limit))  # a bulk source's floor
