"""``ArrayRecordDataSource``: random access over one or more ArrayRecord files.

The source holds a global index over its files (built lazily, on the first ``len`` or read, from each
file's record count, or from ``FileInstruction`` counts without opening the file). Readers are opened
lazily, one per file, shared by threads that read in parallel (the reader's batched ``read`` is
thread-safe and releases the GIL), closed by ``close()`` / ``__exit__`` and never pickled: an
unpickled copy (e.g. in a worker process) reopens what it reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import hashlib
import operator
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, SupportsIndex, runtime_checkable

import numpy as np

import grain_core as grain
from grain_core.author import (
    check_filesystem_args,
    check_indices,
    check_int,
    is_local,
    resolve_filesystem,
)
from grain_plugin_arrayrecord.remote import (
    BULK_READ_SIZE,
    ChunkReadError,
    RemoteReader,
    load_indexes,
    read_many,
)

__all__ = ["ArrayRecordDataSource", "FileInstruction", "FileInstructionLike", "RecordReadError"]

# Random reads want no readahead; the caller's options override these.
_DEFAULT_READER_OPTIONS = {"readahead_buffer_size": "0"}


@dataclasses.dataclass(frozen=True)
class FileInstruction:
    """Records ``[skip, skip + take)`` of the ArrayRecord file ``filename`` (which holds
    ``examples_in_shard`` records). Same fields as TFDS's file instructions; ``take=-1`` means "up to
    the end of the shard". With file instructions the source never opens a file to count it."""

    filename: str
    skip: int = 0
    take: int = -1
    examples_in_shard: int = -1

    def __post_init__(self):
        if not isinstance(self.filename, (str, os.PathLike)):
            raise TypeError(
                "FileInstruction.filename must be a str or os.PathLike, got "
                f"{type(self.filename).__name__}."
            )
        object.__setattr__(self, "filename", os.fspath(self.filename))
        for name in ("skip", "take", "examples_in_shard"):
            value = check_int(getattr(self, name), f"FileInstruction.{name}", minimum=None)
            object.__setattr__(self, name, value)
        if self.examples_in_shard < 0:
            raise ValueError(
                f"FileInstruction for {self.filename!r}: examples_in_shard must be given (>= 0), "
                f"got {self.examples_in_shard}."
            )
        if self.take == -1:
            object.__setattr__(self, "take", max(self.examples_in_shard - self.skip, 0))
        if self.skip < 0 or self.take < 0:
            raise ValueError(
                f"FileInstruction for {self.filename!r}: skip={self.skip} and take={self.take} must "
                "be non-negative (take=-1 means up to the end of the shard)."
            )
        if self.skip + self.take > self.examples_in_shard:
            raise ValueError(
                f"FileInstruction for {self.filename!r}: skip ({self.skip}) + take ({self.take}) = "
                f"{self.skip + self.take} exceeds examples_in_shard ({self.examples_in_shard})."
            )


class RecordReadError(RuntimeError):
    """A record of an ArrayRecord file cannot be read (a corrupted or truncated file). ``path`` is
    the file, ``index`` the record's index in the source and ``record`` its number in the file
    (both None when the failing record could not be singled out). Survives pickling (it crosses
    ``mp_prefetch``'s process boundary whole)."""

    def __init__(self, message: str, path: str, index: int | None, record: int | None):
        super().__init__(message)
        self.path, self.index, self.record = path, index, record

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.path, self.index, self.record))


@runtime_checkable
class FileInstructionLike(Protocol):
    """Anything with TFDS's file-instruction fields (e.g. ``tfds``'s own ``FileInstruction``)."""

    filename: str
    skip: int
    take: int
    examples_in_shard: int


PathOrInstruction = str | os.PathLike | FileInstructionLike


def _is_instruction(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("filename", "skip", "take", "examples_in_shard"))


def _is_remote(path: str) -> bool:
    return "://" in path


def _expand_remote(path: str, filesystem: Any, storage_options: Any) -> list[str]:
    """A remote pattern's sorted matches (as URLs when ``path`` is one); other paths as given."""
    if not glob.has_magic(path):
        return [path]
    fs, inner = resolve_filesystem(
        path, filesystem, storage_options, "ArrayRecordDataSource"
    )
    matches = sorted(fs.glob(inner))
    if not matches:
        raise FileNotFoundError(f"ArrayRecordDataSource: no file matches the pattern {path!r}.")
    return [fs.unstrip_protocol(m) if _is_remote(path) else m for m in matches]


def _expand(path: str) -> list[str]:
    if not _is_remote(path) and glob.has_magic(path):
        matches = sorted(glob.glob(path))
        if not matches:
            raise FileNotFoundError(f"ArrayRecordDataSource: no file matches the pattern {path!r}.")
        return matches
    if not _is_remote(path) and not os.path.exists(path):
        raise FileNotFoundError(f"ArrayRecordDataSource: no such file: {path!r}.")
    if not _is_remote(path) and os.path.isdir(path):
        raise IsADirectoryError(f"ArrayRecordDataSource: {path!r} is a directory, not a file.")
    return [path]


def _options_string(reader_options: Mapping[str, Any] | str | None) -> str:
    """Merges ``reader_options`` (a mapping or the reader's ``"key:value,..."`` string) over the
    defaults into the reader's options string. Raises ``TypeError`` / ``ValueError`` on bad input."""
    if reader_options is None:
        user: dict[str, str] = {}
    elif isinstance(reader_options, str):
        user = {}
        for kv in reader_options.split(","):
            if not kv.strip():
                continue
            if ":" not in kv:
                raise ValueError(
                    f"ArrayRecordDataSource: bad reader_options entry {kv.strip()!r} in "
                    f"{reader_options!r}; expected 'key:value,...'."
                )
            k, v = kv.split(":", 1)
            user[k.strip()] = v.strip()
    elif isinstance(reader_options, Mapping):
        user = {}
        for k, v in reader_options.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise TypeError(
                    "ArrayRecordDataSource: reader_options must map option names (str) to str, int "
                    f"or float values, got {k!r}: {type(v).__name__}."
                )
            user[k] = str(v)
    else:
        raise TypeError(
            "ArrayRecordDataSource: reader_options must be a dict, a 'key:value,...' string or None, "
            f"got {type(reader_options).__name__}."
        )
    merged = {**_DEFAULT_READER_OPTIONS, **user}
    return ",".join(f"{k}:{v}" for k, v in merged.items())


def _open_reader(path: str, options: str):
    from array_record.python.array_record_module import ArrayRecordReader

    if not _is_remote(path) and not os.path.exists(path):
        raise FileNotFoundError(f"ArrayRecordDataSource: no such file: {path!r}.")
    try:
        reader = ArrayRecordReader(path, options)
    except ValueError as e:
        raise ValueError(
            f"ArrayRecordDataSource: cannot open {path!r} with reader_options {options!r}: {e}"
        ) from e
    except Exception as e:
        raise OSError(f"ArrayRecordDataSource: cannot open {path!r}: {e}") from e
    if not reader.ok():
        try:
            reader.close()
        except Exception:
            pass
        raise ValueError(
            f"ArrayRecordDataSource: {path!r} is not a valid ArrayRecord file (the reader could not "
            "read its footer/index)."
        )
    return reader


class ArrayRecordDataSource(grain.sources.RandomAccessDataSource[bytes]):
    """Records of ArrayRecord files as one random-access source of ``bytes``.

    Args:
      paths: a path, a glob pattern, a ``FileInstruction``-like object (``filename``, ``skip``,
        ``take``, ``examples_in_shard``), or a sequence of these. Patterns expand to their sorted
        matches. Records are numbered file after file, in the order given.
      filesystem: an fsspec filesystem (or ``pyarrow.fs.FileSystem``) holding every path, e.g.
        ``s3fs.S3FileSystem(endpoint_url=...)``: all files are then read remotely.
      storage_options: options for the URLs' default fsspec filesystems (e.g. credentials);
        only one of ``filesystem`` / ``storage_options``. With neither, ``s3://``, ``gs://``,
        ``http(s)://``, ``memory://``... paths use fsspec's default filesystem and its usual
        environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``... for S3).
      reader_options: ArrayRecord reader options, e.g. ``{"index_storage_option": "in_memory"}``
        (a dict, or the reader's own ``"key:value,..."`` string). ``readahead_buffer_size`` defaults
        to ``0`` (best for random access). ``max_parallelism`` does not limit the reads the source
        makes: the reader's batched ``read(indices)`` always spreads a call over its process-wide
        pool of 64 threads (see docs/sources.md, "Performance"). Used for local files only.

    Local files are read by array_record's C++ reader; URLs and files of an explicit
    ``filesystem`` by this plugin's own reader of the format (``remote.RemoteReader``): each file's
    footer index is read once (cached, bounded), and the records of one ``__getitems__`` call
    become concurrent, coalesced byte-range reads, retried with bounded backoff on transient
    errors (docs/sources.md, "Remote data").

    Contract: ``len`` is the total of the files' (or instructions') record counts, counted lazily on
    first use; ``source[i]`` returns record ``i``'s bytes (negative ``i`` counts from the end);
    ``__getitems__(indices)`` makes one ``ArrayRecordReader.read`` call per file and returns the
    records in the order asked. Out-of-range indices raise ``IndexError`` naming the length. Reads
    are thread-safe; ``close()`` (or leaving a ``with`` block) closes the readers after the reads in
    flight, and later reads reopen them. Pickling carries the paths, options and index, never a
    reader. ``repr`` lists the files with their record counts and a digest of them, identical in
    every process.

    Raises:
      TypeError: ``paths`` or ``reader_options`` of the wrong type.
      FileNotFoundError: a missing file, or a pattern matching nothing (naming it).
      ValueError: a file that is not ArrayRecord (on first use, naming it), bad reader options, or a
        ``FileInstruction`` whose ``skip + take`` exceeds ``examples_in_shard``.
      RecordReadError: (a ``RuntimeError``) on a read, a record that cannot be read (a corrupted
        chunk), naming the file, the record's number in it and its index in the source.
    """

    #: ``__getitems__`` reads an int64 key array as it is (``MapDataset.source`` then hands it
    #: one instead of a list of Python ints).
    getitems_takes_arrays = True

    #: Indices per ``__getitems__`` call that amortise a call's fixed cost (``to_iter_dataset``
    #: reads chunks of at least this many indices; see ``grain_core.dataset.bulk_reads``): a remote
    #: round trip, or array_record's C++ reader fanning a call out over its thread pool (a
    #: shuffled pipeline over local files reads about twice as fast with threads, and a sixth
    #: faster without, in calls of 4,096 than in the 1,024 its chunks otherwise reach).
    bulk_read_size = BULK_READ_SIZE

    def __init__(
        self,
        paths: PathOrInstruction | Sequence[PathOrInstruction],
        reader_options: Mapping[str, Any] | str | None = None,
        *,
        filesystem: Any = None,
        storage_options: Mapping[str, Any] | None = None,
    ):
        check_filesystem_args(filesystem, storage_options, "ArrayRecordDataSource")
        if isinstance(paths, (str, os.PathLike)) or _is_instruction(paths):
            paths = [paths]
        try:
            items = list(paths)
        except TypeError:
            raise TypeError(
                "ArrayRecordDataSource expects a path, a glob pattern, a FileInstruction or a "
                f"sequence of them, got {type(paths).__name__}."
            ) from None
        if not items:
            raise ValueError("ArrayRecordDataSource needs at least one path.")
        files: list[str] = []
        counts: list[int | None] = []  # None: count by opening the file (lazily)
        skips: list[int] = []
        for item in items:
            if _is_instruction(item):
                fi = (
                    item
                    if isinstance(item, FileInstruction)
                    else FileInstruction(
                        item.filename, item.skip, item.take, item.examples_in_shard
                    )
                )
                files.append(fi.filename)
                counts.append(fi.take)
                skips.append(fi.skip)
            elif isinstance(item, (str, os.PathLike)):
                p0 = os.fspath(item)
                local = is_local(p0, filesystem) and not p0.startswith("file://")
                expanded = (
                    _expand(p0) if local else _expand_remote(p0, filesystem, storage_options)
                )
                for p in expanded:
                    files.append(p)
                    counts.append(None)
                    skips.append(0)
            else:
                raise TypeError(
                    "ArrayRecordDataSource paths must be str, os.PathLike or FileInstruction-like, "
                    f"got {type(item).__name__}."
                )
        self._files = files
        self._given_counts = counts
        self._skips = np.asarray(skips, dtype=np.int64)
        self._reader_options = _options_string(reader_options)
        self._filesystem = filesystem
        self._storage_options = None if storage_options is None else dict(storage_options)
        self._init_runtime()

    def _open(self, f: int) -> Any:
        path = self._files[f]
        if is_local(path, self._filesystem) and not path.startswith("file://"):
            return _open_reader(path, self._reader_options)
        fs, inner = resolve_filesystem(
            path, self._filesystem, self._storage_options, "ArrayRecordDataSource"
        )
        return RemoteReader(fs, inner, name=path)

    # --- runtime state (never pickled) -----------------------------------------------------------

    def _init_runtime(self) -> None:
        # ``_lock`` guards opening, counting users of and closing readers; reads themselves run
        # without a lock, in parallel (see ``_read``).
        self._lock = threading.Condition(threading.Lock())
        self._readers: list[Any] = [None] * len(self._files)
        self._users: dict[Any, int] = {}  # reader -> reads in flight on it
        self._index_lock = threading.Lock()
        if not hasattr(self, "_starts"):
            self._starts = None  # np.ndarray of file start offsets, built lazily
            self._ends = None
            self._counts = None

    def __getstate__(self):
        state = self.__dict__.copy()
        for k in ("_lock", "_readers", "_users", "_index_lock"):
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_runtime()

    @contextlib.contextmanager
    def _using(self, f: int) -> Iterator[Any]:
        """Yields file ``f``'s shared reader (opened if need be), counted as in use so that
        ``close()`` waits for it. No lock is held while the caller uses the reader:
        ``ArrayRecordReader.read(indices)`` is safe to call from several threads at once on one
        reader and releases the GIL while it reads, so threads read in parallel."""
        with self._lock:
            r = self._readers[f]
            if r is None:
                r = self._open(f)
                self._readers[f] = r
            self._users[r] = self._users.get(r, 0) + 1
        try:
            yield r
        finally:
            with self._lock:
                left = self._users.pop(r) - 1
                if left:
                    self._users[r] = left
                else:
                    self._lock.notify_all()

    def _chunk_error(self, f: int, e: ChunkReadError) -> RecordReadError:
        starts, _ = self._index()
        index = int(starts[f]) + e.record - int(self._skips[f])
        return RecordReadError(
            f"ArrayRecordDataSource: record {index} (record {e.record} of file "
            f"{self._files[f]!r}) cannot be read: {e}",
            self._files[f],
            index,
            e.record,
        )

    def _read_files(self, reads: list[tuple[int, list[int]]]) -> list[list[bytes]]:
        """``[self._read(f, local) for f, local in reads]``; remote files' requests all in
        flight together (one round trip for records of several files, not one per file)."""
        with contextlib.ExitStack() as stack:
            readers = [stack.enter_context(self._using(f)) for f, _ in reads]
            if all(isinstance(r, RemoteReader) for r in readers):
                try:
                    return read_many([(r, local) for r, (_, local) in zip(readers, reads)])
                except ChunkReadError as e:
                    f = next(f for r, (f, _) in zip(readers, reads) if r.name == e.path)
                    raise self._chunk_error(f, e) from e
        return [self._read(f, local) for f, local in reads]

    def _read(self, f: int, local: list[int]) -> list[bytes]:
        with self._using(f) as r:
            if isinstance(r, RemoteReader):
                try:
                    return r.read(local)
                except ChunkReadError as e:
                    raise self._chunk_error(f, e) from e
            try:
                return r.read(local)
            except Exception as e:  # e.g. "Corrupted Riegeli/records file ...": locate the record
                raise self._read_error(r, f, local, e) from e

    def _read_error(self, reader: Any, f: int, local: list[int], error: Exception) -> Exception:
        """The error for a failed batched read of file ``f``: the first record of ``local`` that
        cannot be read (found by bisecting the batch), named by its file, its record number in the
        file and its index in this source."""
        lo, hi = 0, len(local)  # invariant: local[:lo] reads, local[:hi] fails
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                reader.read(local[lo:mid])
                lo = mid
            except Exception:
                hi = mid
        record = local[hi - 1] if local else -1
        try:
            reader.read([record])
        except Exception:
            pass
        else:  # not reproducible record by record: report the batch
            return RecordReadError(
                f"ArrayRecordDataSource: reading {len(local)} records of {self._files[f]!r} failed: "
                f"{error}",
                self._files[f],
                None,
                None,
            )
        starts, _ = self._index()
        index = int(starts[f]) + record - int(self._skips[f])
        return RecordReadError(
            f"ArrayRecordDataSource: record {index} (record {record} of file {self._files[f]!r}) "
            f"cannot be read: {error}. The file is corrupted or truncated; re-create or re-copy it.",
            self._files[f],
            index,
            record,
        )

    def _index(self) -> tuple[np.ndarray, np.ndarray]:
        if self._ends is None:
            with self._index_lock:  # one thread counts; the others wait for its index
                if self._ends is None:
                    given = self._given_counts
                    with contextlib.ExitStack() as stack:
                        readers = {
                            f: stack.enter_context(self._using(f))
                            for f, c in enumerate(given)
                            if c is None
                        }
                        # remote files' indexes in a few concurrent round trips, not two each
                        load_indexes([r for r in readers.values() if isinstance(r, RemoteReader)])
                        counts = [
                            int(readers[f].num_records()) if c is None else c
                            for f, c in enumerate(given)
                        ]
                    ends = np.cumsum(np.asarray(counts, dtype=np.int64))
                    self._counts = counts
                    self._starts = ends - np.asarray(counts, dtype=np.int64)
                    self._ends = ends
        return self._starts, self._ends

    # --- the source protocol -----------------------------------------------------------------------

    @property
    def paths(self) -> list[str]:
        """The files read, in record order (patterns expanded)."""
        return list(self._files)

    def __len__(self) -> int:
        _, ends = self._index()
        return int(ends[-1])

    @property
    def element_spec(self) -> Any:
        """Each record is ``bytes``: a scalar of object dtype (``get_element_spec`` of
        ``MapDataset.source(this)``; batching stacks ``bytes`` into object arrays)."""
        return grain.experimental.ShapeDtypeStruct(shape=(), dtype=np.dtype(object))

    def __getitem__(self, record_key: SupportsIndex) -> bytes:
        """Record ``record_key``'s bytes (negative indices count from the end)."""
        i = operator.index(record_key)
        starts, ends = self._index()
        n = int(ends[-1])
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"index {i} out of range for ArrayRecordDataSource of length {n}.")
        f = int(np.searchsorted(ends, j, side="right"))
        return self._read(f, [j - int(starts[f]) + int(self._skips[f])])[0]

    def __getitems__(self, record_keys: Sequence[int]) -> list[bytes]:
        """The records at ``record_keys``, in the order asked (repeats allowed): one reader
        ``read(indices)`` call per file touched."""
        starts, ends = self._index()
        keys = check_indices(record_keys, int(ends[-1]), "ArrayRecordDataSource")
        if keys.size == 0:
            return []
        if len(ends) == 1:
            return self._read(0, (keys + self._skips[0]).tolist())
        fids = np.searchsorted(ends, keys, side="right")
        local = keys - starts[fids] + self._skips[fids]
        first = int(fids[0])
        if (fids == first).all():  # one file: the reader returns records in the order asked
            return self._read(first, local.tolist())
        # Several files: one read per file (indices in the order asked within each file), then the
        # records are put back in the order asked.
        order = np.argsort(fids, kind="stable")
        bounds = np.flatnonzero(np.diff(fids[order])) + 1
        groups = np.split(order, bounds)
        got = self._read_files([(int(fids[g[0]]), local[g].tolist()) for g in groups])
        out: list[Any] = [None] * keys.size
        for positions, records in zip(groups, got):
            for p, rec in zip(positions.tolist(), records):
                out[p] = rec
        return out

    def __iter__(self) -> Iterator[bytes]:
        """All records in order, read 1,024 at a time."""
        starts, ends = self._index()
        for f in range(len(self._files)):
            s0, e0 = int(self._skips[f]), int(ends[f]) - int(starts[f])  # first local index, count
            for s in range(0, e0, 1024):
                yield from self._read(f, list(range(s0 + s, s0 + min(s + 1024, e0))))

    # --- resources -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes every open reader (after the reads in flight on it); later reads reopen them."""
        with self._lock:
            for f, r in enumerate(self._readers):
                if r is not None:
                    self._readers[f] = None  # new reads open a fresh reader
                    self._lock.wait_for(lambda r=r: r not in self._users)
                    r.close()

    def __enter__(self) -> ArrayRecordDataSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # --- identity ------------------------------------------------------------------------------------

    def _descriptions(self) -> list[str]:
        self._index()
        out = []
        for f, path in enumerate(self._files):
            c = self._counts[f]
            if self._given_counts[f] is None:
                out.append(f"{path}:{c}")
            else:
                out.append(f"{path}[{int(self._skips[f])}:{int(self._skips[f]) + c}]")
        return out

    def __repr__(self) -> str:
        desc = self._descriptions()
        digest = hashlib.sha1("\n".join(desc).encode()).hexdigest()[:16]
        shown = desc if len(desc) <= 8 else desc[:4] + ["..."] + desc[-2:]
        return (
            f"ArrayRecordDataSource(len={len(self)}, num_files={len(desc)}, digest={digest}, "
            f"files={shown})"
        )

    def __eq__(self, other) -> bool:
        return isinstance(other, ArrayRecordDataSource) and (
            other._descriptions() == self._descriptions()
        )

    def __hash__(self) -> int:
        return hash(tuple(self._descriptions()))
