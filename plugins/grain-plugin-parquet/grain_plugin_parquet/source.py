"""``ParquetDataSource``: random access to the rows of Parquet files (beyond Grain).

A global row index is built from the files' footers (row counts per row group), without decoding
data. A read decodes the row group holding the row, column-wise into numpy, and keeps it in an LRU
cache bounded by ``cache_bytes`` of decoded Arrow data; bulk reads (``__getitems__``) decode each
row group once and take all the rows asked from it at once. Random access costs a row-group decode
per cache miss: write files with small row groups (e.g. 1-10k rows) for shuffled reading.
"""

from __future__ import annotations

import collections
import glob
import hashlib
import operator
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, SupportsIndex

import numpy as np

import grain_core as grain
from grain_core.author import check_indices, check_int
from grain_plugin_parquet import _io

__all__ = ["ParquetDataSource"]


def _expand(path: str, filesystem: Any = None) -> list[str]:
    if filesystem is None and "://" not in path and glob.has_magic(path):
        matches = sorted(glob.glob(path))
        if not matches:
            raise FileNotFoundError(f"ParquetDataSource: no file matches the pattern {path!r}.")
        return matches
    return [path]


class ParquetDataSource(grain.sources.RandomAccessDataSource[dict]):
    """Rows of Parquet files as one random-access source of dicts ``{column: numpy value}``.

    Args:
      paths: a path, URI or glob pattern (local paths only), or a sequence of them; rows are
        numbered file after file, in the order given (pattern matches sorted).
      columns: read only these columns (all files must have them).
      filesystem: an explicit ``pyarrow.fs.FileSystem`` (or fsspec filesystem) for the paths.
      storage_options: options for the URLs' fsspec filesystem (e.g. credentials, an endpoint);
        only one of ``filesystem`` / ``storage_options``. URLs PyArrow does not know
        (``http(s)://``, ``memory://``) are read through fsspec.
      cache_bytes: bound on the (estimated) memory of the decoded row groups kept (default 256 MiB;
        at least the row group being read is kept).

    Contract: every file's footer is read at construction (so bad files fail here, naming them);
    ``source[i]`` is row ``i`` as ``{column: numpy value}``; ``__getitems__(indices)`` decodes each
    row group touched once and returns the rows in the order asked; out-of-range indices raise
    ``IndexError`` naming the length. Thread-safe (a file is decoded by one thread at a time; a row
    group another thread is decoding is not decoded twice). Pickling carries the paths and index,
    never an open file or the cache. ``close()`` / ``with`` closes the files and drops the cache.
    ``repr`` names the files, their row counts and the columns, identical in every process.
    """

    def __init__(
        self,
        paths: str | os.PathLike | Sequence[str | os.PathLike],
        *,
        columns: Sequence[str] | None = None,
        filesystem: Any = None,
        cache_bytes: int = 256 << 20,
        storage_options: Mapping[str, Any] | None = None,
    ):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        try:
            items = list(paths)
        except TypeError:
            raise TypeError(
                "ParquetDataSource expects a path, a glob pattern or a sequence of them, got "
                f"{type(paths).__name__}."
            ) from None
        files = [
            p
            for item in items
            for p in _expand(_io.check_path(item, "ParquetDataSource"), filesystem)
        ]
        if not files:
            raise ValueError("ParquetDataSource needs at least one path.")
        filesystem, files = _io.filesystem_and_paths(
            files, filesystem, storage_options, "ParquetDataSource"
        )
        self._files = files
        self._filesystem = filesystem
        self._cache_bytes = check_int(cache_bytes, "ParquetDataSource cache_bytes")
        sizes, rg_file, rg_local = [], [], []
        names = None
        first: Any = None  # the first file: its schema gives the element spec
        nullable: set[str] = set()
        for f, path in enumerate(files):
            pf, handle = _io.open_parquet(path, filesystem)
            try:
                cols = _io.check_columns(pf, columns, path)
                nullable |= _io.null_columns(pf, cols)
                if names is None:
                    names = cols
                    first = pf
                elif columns is None and cols != names:
                    raise ValueError(
                        f"ParquetDataSource: {path!r} has columns {cols}, but {files[0]!r} has "
                        f"{names}; pass columns=[...] to read a common subset."
                    )
                meta = pf.metadata
                for g in range(meta.num_row_groups):
                    sizes.append(meta.row_group(g).num_rows)
                    rg_file.append(f)
                    rg_local.append(g)
            finally:
                handle.close()
        self._names = list(names or [])
        self._spec = {} if first is None else _io.element_spec(first, self._names, nullable)
        self._file_rows = [0] * len(files)
        for s, f in zip(sizes, rg_file):
            self._file_rows[f] += s
        ends = np.cumsum(np.asarray(sizes, dtype=np.int64)) if sizes else np.zeros(0, np.int64)
        self._rg_ends = ends
        self._rg_starts = ends - np.asarray(sizes, dtype=np.int64)
        self._rg_file = rg_file
        self._rg_local = rg_local
        self._len = int(ends[-1]) if len(ends) else 0
        self._init_runtime()

    @property
    def element_spec(self) -> dict[str, Any]:
        """``{column: ShapeDtypeStruct}`` of a row, from the first file's schema (no rows read):
        numbers their numpy dtype, lists of numbers ``(None,)`` arrays; strings, binaries, other
        types and integer or bool columns that may hold nulls in any file (rows from row groups
        with nulls are float) object dtype. ``MapDataset.source(src)`` answers
        ``get_element_spec`` with it."""
        return dict(self._spec)

    # --- runtime state (never pickled) -----------------------------------------------------------

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._file_locks = [threading.Lock() for _ in self._files]
        self._open_files: list[Any] = [None] * len(self._files)
        self._cache: collections.OrderedDict[int, tuple[list[np.ndarray], int]] = (
            collections.OrderedDict()
        )
        self._cached_bytes = 0

    def __getstate__(self):
        state = self.__dict__.copy()
        for k in ("_lock", "_file_locks", "_open_files", "_cache", "_cached_bytes"):
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_runtime()

    def _row_group(self, g: int) -> list[np.ndarray]:
        with self._lock:
            hit = self._cache.get(g)
            if hit is not None:
                self._cache.move_to_end(g)
                return hit[0]
        f = self._rg_file[g]
        with self._file_locks[f]:
            with self._lock:  # decoded by another thread while this one waited for the file?
                hit = self._cache.get(g)
            if hit is not None:
                return hit[0]
            if self._open_files[f] is None:
                self._open_files[f] = _io.open_parquet(self._files[f], self._filesystem)
            pf = self._open_files[f][0]
            cols, nbytes = _io.read_row_group(pf, self._rg_local[g], self._names, self._files[f])
        with self._lock:
            if g not in self._cache:
                self._cache[g] = (cols, nbytes)
                self._cached_bytes += nbytes
            while self._cached_bytes > self._cache_bytes and len(self._cache) > 1:
                _, (_, size) = self._cache.popitem(last=False)
                self._cached_bytes -= size
        return cols

    # --- the source protocol -----------------------------------------------------------------------

    @property
    def paths(self) -> list[str]:
        """The files read, in row order (patterns expanded)."""
        return list(self._files)

    @property
    def column_names(self) -> list[str]:
        """The columns each row holds."""
        return list(self._names)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, record_key: SupportsIndex) -> dict[str, Any]:
        """Row ``record_key`` (negative indices count from the end)."""
        i = operator.index(record_key)
        j = i + self._len if i < 0 else i
        if not 0 <= j < self._len:
            raise IndexError(
                f"index {i} out of range for ParquetDataSource of length {self._len}."
            )
        g = int(np.searchsorted(self._rg_ends, j, side="right"))
        cols = self._row_group(g)
        r = j - int(self._rg_starts[g])
        return {n: c[r] for n, c in zip(self._names, cols)}

    def __getitems__(self, record_keys: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at ``record_keys``, in the order asked: each row group touched is decoded (or
        found in the cache) once and its rows are taken with one fancy index per column."""
        keys = check_indices(record_keys, self._len, "ParquetDataSource")
        if keys.size == 0:
            return []
        gids = np.searchsorted(self._rg_ends, keys, side="right")
        local = keys - self._rg_starts[gids]
        names = self._names
        first = int(gids[0])
        if (gids == first).all():
            taken = [c[local] for c in self._row_group(first)]
            return [dict(zip(names, values)) for values in zip(*taken)]
        out: list[Any] = [None] * keys.size
        order = np.argsort(gids, kind="stable")
        bounds = np.flatnonzero(np.diff(gids[order])) + 1
        for positions in np.split(order, bounds):
            cols = self._row_group(int(gids[positions[0]]))
            taken = [c[local[positions]] for c in cols]
            for p, values in zip(positions.tolist(), zip(*taken)):
                out[p] = dict(zip(names, values))
        return out

    # --- resources -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes open files and drops the cache; later reads reopen what they need."""
        for f, lock in enumerate(self._file_locks):
            with lock:
                if self._open_files[f] is not None:
                    self._open_files[f][1].close()
                    self._open_files[f] = None
        with self._lock:
            self._cache.clear()
            self._cached_bytes = 0

    def __enter__(self) -> ParquetDataSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- identity ------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        desc = [f"{p}:{n}" for p, n in zip(self._files, self._file_rows)]
        fs = _io.describe_filesystem(self._filesystem)
        digest = hashlib.sha1("\n".join([*desc, *self._names, str(fs)]).encode()).hexdigest()[:16]
        shown = desc if len(desc) <= 8 else desc[:4] + ["..."] + desc[-2:]
        where = "" if fs is None else f"filesystem={fs!r}, "
        return (
            f"ParquetDataSource(len={self._len}, num_files={len(desc)}, digest={digest}, "
            f"{where}columns={self._names}, files={shown})"
        )
