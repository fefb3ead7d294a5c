"""Random access to an ArrayRecord file on any fsspec filesystem (S3, GCS, HTTP, memory, ...).

``RemoteReader`` offers the two calls ``ArrayRecordDataSource`` makes of array_record's C++ reader
(``num_records()``, ``read(indices)``) over byte-range reads:

* **index**: on first use the file's size, its last block (the postscript) and its footer are read
  (one or two range requests after the size: the last 256 KiB come in one request, enough for the
  footer of files up to ~12,000 chunks). Indexes are kept in a process-wide LRU bounded by bytes
  (:data:`INDEX_CACHE_BYTES`), so a source over many files re-reads an index only after eviction.
* **reads**: ``read(indices)`` maps the indices to the chunks that hold them, takes decoded chunks
  from a process-wide LRU (bounded by :data:`CHUNK_CACHE_BYTES`; only chunks of several records are
  kept, so sequential reads of big chunks decode each chunk once), coalesces the byte spans of the
  other chunks (two spans closer than ``max_gap`` bytes become one request, no request above
  ``max_request`` bytes unless one chunk is bigger) and fetches them concurrently with
  :func:`grain_core.filesystems.read_ranges` (``concurrency`` requests in flight, transient errors
  retried with bounded backoff), at most ``max_inflight`` bytes per wave. A shuffled batch costs
  one round trip per wave, not one per record.
* **errors**: a damaged or truncated chunk is an ``ArrayRecordFormatError`` (a ``ValueError``)
  naming the file and the byte offset; ``ChunkReadError`` adds the first record asked of it.

Files are assumed not to change while they are read (as with any object store reader).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from grain_core.author import (
    RetryPolicy,
    file_size,
    read_ranges,
    tune_malloc,
    unique_ints,
    with_retries,
)
from grain_plugin_arrayrecord import http_ranges, riegeli

__all__ = [
    "BULK_READ_SIZE",
    "CHUNK_CACHE_BYTES",
    "INDEX_CACHE_BYTES",
    "ChunkReadError",
    "INDEX_WAVE",
    "RemoteReader",
    "load_indexes",
]

INDEX_CACHE_BYTES = 256 << 20
CHUNK_CACHE_BYTES = 64 << 20
_TAIL_BYTES = 256 << 10
#: Defaults of ``RemoteReader``'s knobs (the source's readers use them).
CONCURRENCY = 128
#: Coalescing: a hole between two wanted chunks is read when reading it costs less than another
#: request would (the CPU of client and server per request against per byte read; see
#: docs/sources.md, "Where the time goes", for how it was measured).
MAX_GAP = 48 << 10
MAX_REQUEST = 1 << 20
MAX_INFLIGHT = 64 << 20
#: ``ArrayRecordDataSource.bulk_read_size`` over remote files: a shuffled call this large costs
#: about one round trip per ``concurrency`` records (its ranges are in flight together and nearby
#: ones coalesce), and its planning is spread over more records. A pipeline's chunks are also
#: bounded by bytes (``CHUNK_BYTES``, 4 MiB), so large records get fewer indices per call.
BULK_READ_SIZE = 4096


class ChunkReadError(riegeli.ArrayRecordFormatError):
    """A chunk holding asked records cannot be decoded; ``record`` is the first such record's
    number in the file."""

    def __init__(self, error: riegeli.ArrayRecordFormatError, record: int):
        ValueError.__init__(self, str(error))
        self.path, self.offset, self.record = error.path, error.offset, record

    def __reduce__(self):
        return (_rebuild_chunk_error, (str(self), self.path, self.offset, self.record))


def _rebuild_chunk_error(message: str, path: str, offset: int, record: int) -> ChunkReadError:
    err = ChunkReadError.__new__(ChunkReadError)
    ValueError.__init__(err, message)
    err.path, err.offset, err.record = path, offset, record
    return err


class _LRU:
    """A thread-safe LRU of values with an ``nbytes``, bounded by their total bytes."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._items: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        size = value.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._items[key] = value
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, dropped = self._items.popitem(last=False)
                self._bytes -= dropped.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes


_INDEXES = _LRU(INDEX_CACHE_BYTES)
_CHUNKS = _LRU(CHUNK_CACHE_BYTES)


def clear_caches() -> None:
    """Forgets every cached index and decoded chunk (e.g. after files were rewritten), and closes
    idle HTTP connections."""
    _INDEXES.clear()
    _CHUNKS.clear()
    http_ranges.close_idle()


def fetch_ranges(
    fs: Any,
    paths: Sequence[str],
    starts: Sequence[int],
    ends: Sequence[int],
    *,
    retry: RetryPolicy,
    concurrency: int,
    on_range: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``read_ranges`` of ``grain_core`` (fsspec), or, for plain ``http://`` URLs of a default
    fsspec HTTP filesystem, :func:`http_ranges.read_ranges` (same contract, about a tenth of the
    CPU per request). With ``on_range``, range ``i``'s bytes go to ``on_range(i, data)`` instead
    of the list (as they arrive over ``http_ranges``, else after all are in)."""
    if paths and all(http_ranges.usable(fs, p) for p in set(paths)):
        return http_ranges.read_ranges(
            fs, paths, starts, ends, retry=retry, concurrency=concurrency, on_range=on_range
        )
    datas: list[Any] = read_ranges(fs, paths, starts, ends, retry=retry, concurrency=concurrency)
    if on_range is None:
        return datas
    for i, data in enumerate(datas):
        on_range(i, data)
        datas[i] = None  # decoded: not kept
    return datas


def coalesce(
    begins: np.ndarray, ends: np.ndarray, max_gap: int, max_request: int
) -> list[tuple[int, int, int, int]]:
    """Groups sorted, disjoint spans into requests: ``(first span, last span + 1, request begin,
    request end)``; each span joins the request before it while the hole between them is at most
    ``max_gap`` and the request stays within ``max_request`` bytes (greedily, left to right). The
    runs of spans split by larger holes are found with numpy, and a run longer than
    ``max_request`` is cut by a binary search per request."""
    n = len(begins)
    if n == 0:
        return []
    b = np.asarray(begins, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    cuts = np.flatnonzero(b[1:] - e[:-1] > max_gap) + 1
    firsts = np.concatenate(([0], cuts))
    stops = np.concatenate((cuts, [n]))
    out = []
    for i, j, rb, re_ in zip(
        firsts.tolist(), stops.tolist(), b[firsts].tolist(), e[stops - 1].tolist()
    ):
        if re_ - rb <= max_request:
            out.append((i, j, rb, re_))
            continue
        while i < j:  # a run over max_request bytes: the most spans that fit, in turn
            rb = int(b[i])
            k = min(j, max(i + 1, int(np.searchsorted(e, rb + max_request, side="right"))))
            out.append((i, k, rb, int(e[k - 1])))
            i = k
    return out


class RemoteReader:
    """Random access to the ArrayRecord file ``path`` of fsspec filesystem ``fs``.

    Thread-safe: several threads may call ``read`` at once. ``name`` is how errors name the file
    (defaults to ``path``). See the module docstring for the caches, coalescing and retries.
    """

    def __init__(
        self,
        fs: Any,
        path: str,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        concurrency: int | None = None,
        max_gap: int | None = None,
        max_request: int | None = None,
        max_inflight: int | None = None,
    ):
        self._fs, self._path, self.name = fs, path, name or path
        self._retry = retry or RetryPolicy()
        self._concurrency = CONCURRENCY if concurrency is None else concurrency
        self._max_gap = MAX_GAP if max_gap is None else max_gap
        self._max_request = MAX_REQUEST if max_request is None else max_request
        self._max_inflight = MAX_INFLIGHT if max_inflight is None else max_inflight
        self._key = (fs, path)
        self._index_lock = threading.Lock()
        # Reads allocate and free range buffers of up to ``max_request`` bytes at the rate of
        # records: with glibc's default thresholds each one faulted its pages in afresh.
        tune_malloc()

    # --- index ----------------------------------------------------------------------------------

    def _ranges(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        return fetch_ranges(
            self._fs,
            [self._path] * len(starts),
            starts,
            ends,
            retry=self._retry,
            concurrency=self._concurrency,
        )

    def index(self) -> riegeli.FileIndex:
        """The file's index (read once, then from the process-wide cache)."""
        found = _INDEXES.get(self._key)
        if found is not None:
            return found
        with self._index_lock:
            found = _INDEXES.get(self._key)
            if found is None:
                found = self._load_index()
                _INDEXES.put(self._key, found)
            return found

    def _load_index(self) -> riegeli.FileIndex:
        size = self._size()
        first, ps = self._tail_span(size)
        (tail,) = self._ranges([first], [size])
        found = self._index_from_tail(tail, first, ps, size)
        if isinstance(found, riegeli.FileIndex):
            return found
        (raw,) = self._ranges([found], [ps])
        return self._index_from_footer(raw, found, ps, size)

    def _size(self) -> int:
        try:
            return file_size(self._fs, self._path, self._retry)
        except FileNotFoundError as e:
            raise FileNotFoundError(f"ArrayRecordDataSource: no such file: {self.name!r}.") from e

    def _tail_span(self, size: int) -> tuple[int, int]:
        """``(first, ps)``: where the tail read for the index starts, the postscript's offset."""
        if size < riegeli.BLOCK_SIZE or size % riegeli.BLOCK_SIZE:
            raise riegeli.ArrayRecordFormatError(
                f"the file has {size} bytes; ArrayRecord files end on a {riegeli.BLOCK_SIZE}-byte "
                "block boundary (their postscript fills the last block), so it is truncated or "
                "not an ArrayRecord file",
                self.name,
                size,
            )
        ps = ((size - 1) // riegeli.BLOCK_SIZE) * riegeli.BLOCK_SIZE
        return max(0, min(ps, size - _TAIL_BYTES)), ps

    def _index_from_tail(
        self, tail: Any, first: int, ps: int, size: int
    ) -> riegeli.FileIndex | int:
        """The index from the file's bytes ``[first, size)``, or the footer's offset when the
        footer starts before ``first`` (``[footer, ps)`` must be read)."""
        self._check_length(tail, first, size)
        footer = riegeli.parse_postscript(memoryview(tail)[ps - first :], ps, size, self.name)
        if footer < first:
            return footer
        raw = memoryview(tail)[footer - first : ps - first]
        return riegeli.parse_footer(raw, footer, size, self.name)

    def _index_from_footer(self, raw: Any, footer: int, ps: int, size: int) -> riegeli.FileIndex:
        self._check_length(raw, footer, ps)
        return riegeli.parse_footer(raw, footer, size, self.name)

    def _check_length(self, data: bytes, begin: int, end: int) -> None:
        if len(data) != end - begin:
            raise riegeli.ArrayRecordFormatError(
                f"asked bytes [{begin}, {end}) and got {len(data)} (the file ends early or "
                "changed while being read)",
                self.name,
                begin + len(data),
            )

    def num_records(self) -> int:
        return self.index().num_records

    def ok(self) -> bool:
        return True

    def close(self) -> None:
        """Nothing to release (no file handle is held between reads)."""

    # --- records --------------------------------------------------------------------------------

    def read(self, indices: Sequence[int]) -> list[bytes]:
        """Records ``indices`` (numbers in this file, each in ``[0, num_records())``), in order."""
        return read_many([(self, indices)])[0]

    def _plan(self, indices: Sequence[int]) -> _Plan:
        """What reading ``indices`` needs: the chunks that hold them, those found in the cache,
        and the coalesced requests for the others."""
        idx = self.index()
        keys = np.asarray(indices, dtype=np.int64)
        plan = _Plan(self, idx, keys)
        if keys.size == 0:
            return plan
        if keys.min() < 0 or keys.max() >= idx.num_records:
            raise IndexError(
                f"record numbers must be in [0, {idx.num_records}) for {self.name!r}, got "
                f"{int(keys.min())}..{int(keys.max())}."
            )
        if plan.singles is not None:  # one record per chunk: chunk c holds record c
            plan.cids = keys
            plan.missing = unique_ints(keys)  # such chunks are never cached
            plan.singles = [None] * plan.missing.size  # decoded records, as ``missing``
        else:
            plan.cids = np.searchsorted(idx.record_starts, keys, side="right") - 1
            missing = []
            for c in unique_ints(plan.cids).tolist():
                got = _CHUNKS.get((self._key, c))
                if got is None:
                    missing.append(c)
                else:
                    plan.chunks[c] = got
            plan.missing = np.asarray(missing, dtype=np.int64)
        plan.begins = idx.chunk_offsets[plan.missing]
        plan.ends = idx.chunk_offsets[plan.missing + 1]
        plan.spans = (plan.begins.tolist(), plan.ends.tolist())
        plan.requests = coalesce(plan.begins, plan.ends, self._max_gap, self._max_request)
        return plan


class _Plan:
    """One reader's part of a :func:`read_many` call (see ``RemoteReader._plan``)."""

    def __init__(self, reader: RemoteReader, idx: riegeli.FileIndex, keys: np.ndarray):
        self.reader, self.idx, self.keys = reader, idx, keys
        self.cids = np.zeros(0, dtype=np.int64)
        self.chunks: dict[int, riegeli.Chunk] = {}
        # Files of one record per chunk (group_size:1): record ``missing[k]`` is ``singles[k]``,
        # decoded in bulk.
        one_each = idx.num_records == len(idx.chunk_offsets) - 1
        self.singles: list[bytes | None] | None = [] if one_each else None
        self.missing = self.begins = self.ends = self.cids
        self.spans: tuple[list[int], list[int]] = ([], [])  # begins and ends, as lists
        self.requests: list[tuple[int, int, int, int]] = []

    def decode(self, request: tuple[int, int, int, int], data: bytes) -> None:
        """Decodes the chunks of ``request`` (one of ``requests``) from its bytes ``data``."""
        reader, idx = self.reader, self.idx
        i, j, b, e = request
        reader._check_length(data, b, e)
        view = memoryview(data)
        ks: Sequence[int] = range(i, j)
        singles = self.singles
        if singles is not None:
            begins, ends = self.spans
            got = riegeli.decode_singles(data, b, begins[i:j], ends[i:j])
            singles[i:j] = got
            ks = [i + k for k, rec in enumerate(got) if rec is None] if None in got else ()
        for k in ks:
            c, cb, ce = int(self.missing[k]), int(self.begins[k]), int(self.ends[k])
            try:
                chunk = riegeli.decode_chunk(view[cb - b : ce - b], cb, reader.name)
            except riegeli.ArrayRecordFormatError as err:
                raise ChunkReadError(err, self._first_record(c)) from err
            expected = int(idx.record_starts[c + 1] - idx.record_starts[c])
            if len(chunk.ends) != expected:
                err = riegeli.ArrayRecordFormatError(
                    f"the chunk holds {len(chunk.ends)} records, the footer says {expected}",
                    reader.name,
                    cb,
                )
                raise ChunkReadError(err, self._first_record(c))
            if singles is not None:
                singles[k] = chunk.record(0)
                continue
            self.chunks[c] = chunk
            if expected > 1:
                _CHUNKS.put((reader._key, c), chunk)

    def _first_record(self, c: int) -> int:
        return int(self.keys[self.cids == c].min())

    def records(self) -> list[bytes]:
        if self.keys.size == 0:
            return []
        if self.singles is not None:  # by position in ``missing`` (sorted, unique)
            where = np.searchsorted(self.missing, self.keys)
            return list(map(self.singles.__getitem__, where.tolist()))  # type: ignore[arg-type]
        chunks = self.chunks
        local = self.keys - self.idx.record_starts[self.cids]
        return [chunks[c].record(i) for c, i in zip(self.cids.tolist(), local.tolist())]


#: ``load_indexes`` reads the indexes of at most this many files at a time (their tails, 256 KiB
#: each, are held until parsed).
INDEX_WAVE = 64


def load_indexes(readers: Sequence[RemoteReader]) -> None:
    """Reads and caches the indexes of ``readers`` not cached yet, the files' requests in flight
    together: the sizes of a wave of files (:data:`INDEX_WAVE`) in one concurrent call
    (``fs.sizes``), then their tails in one, then the footers longer than a tail in one, so
    opening many files costs a few round trips instead of two per file. A file whose index this
    cannot read (missing, damaged, a failing size call) is left uncached:
    :meth:`RemoteReader.index` then reads it alone and raises its error, naming the file."""
    todo: dict[Hashable, RemoteReader] = {}
    for r in readers:
        if r._key not in todo and _INDEXES.get(r._key) is None:
            todo[r._key] = r
    groups: dict[int, list[RemoteReader]] = {}
    for r in todo.values():
        groups.setdefault(id(r._fs), []).append(r)
    for group in groups.values():
        for w in range(0, len(group), INDEX_WAVE):
            _load_wave(group[w : w + INDEX_WAVE])


def _load_wave(wave: list[RemoteReader]) -> None:
    """:func:`load_indexes` for files of one filesystem, all cached or none (on any failure)."""
    first = wave[0]
    fs, paths = first._fs, [r._path for r in wave]
    try:
        sizes = [int(n) for n in with_retries(lambda: fs.sizes(paths), "sizes", first._retry)]
        spans = [r._tail_span(n) for r, n in zip(wave, sizes)]
        tails = fetch_ranges(
            fs,
            paths,
            [b for b, _ in spans],
            sizes,
            retry=first._retry,
            concurrency=first._concurrency,
        )
        found = [
            r._index_from_tail(t, b, ps, n) for r, t, (b, ps), n in zip(wave, tails, spans, sizes)
        ]
        del tails
        longer = [k for k, f in enumerate(found) if not isinstance(f, riegeli.FileIndex)]
        if longer:
            raws = fetch_ranges(
                fs,
                [paths[k] for k in longer],
                [found[k] for k in longer],
                [spans[k][1] for k in longer],
                retry=first._retry,
                concurrency=first._concurrency,
            )
            for k, raw in zip(longer, raws):
                found[k] = wave[k]._index_from_footer(raw, found[k], spans[k][1], sizes[k])
    except Exception:  # noqa: BLE001 - each file's own read names what is wrong with it
        return
    for r, idx in zip(wave, found):
        _INDEXES.put(r._key, idx)


def read_many(reads: Sequence[tuple[RemoteReader, Sequence[int]]]) -> list[list[bytes]]:
    """``[reader.read(indices) for reader, indices in reads]``, with the requests of all of them
    in flight together (one concurrent batch per filesystem, in waves of at most the first
    reader's ``max_inflight`` bytes), so records of several files cost one round trip, not one
    per file."""
    plans = [reader._plan(indices) for reader, indices in reads]
    groups: dict[int, list[_Plan]] = {}
    for plan in plans:
        if plan.requests:
            groups.setdefault(id(plan.reader._fs), []).append(plan)
    for group in groups.values():
        first = group[0].reader
        todo = [(plan, req) for plan in group for req in plan.requests]
        pos = 0
        while pos < len(todo):  # waves: each takes at least one request, so this ends
            stop, size = pos + 1, todo[pos][1][3] - todo[pos][1][2]
            while stop < len(todo):
                more = todo[stop][1][3] - todo[stop][1][2]
                if size + more > first._max_inflight:
                    break
                size += more
                stop += 1
            wave = todo[pos:stop]

            def decode(k: int, data: Any, wave: list[tuple[_Plan, Any]] = wave) -> None:
                wave[k][0].decode(wave[k][1], data)

            fetch_ranges(  # each request is decoded as it arrives, while the others are awaited
                first._fs,
                [plan.reader._path for plan, _ in wave],
                [req[2] for _, req in wave],
                [req[3] for _, req in wave],
                retry=first._retry,
                concurrency=first._concurrency,
                on_range=decode,
            )
            pos = stop
    return [plan.records() for plan in plans]
