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
from collections.abc import Sequence
from typing import Any

import numpy as np

import grain_core as grain
from grain_plugin_parquet import _io

__all__ = ["ParquetDataSource"]


def _expand(path: str) -> list[str]:
    if "://" not in path and glob.has_magic(path):
        matches = sorted(glob.glob(path))
        if not matches:
            raise FileNotFoundError(f"ParquetDataSource: no file matches the pattern {path!r}.")
        return matches
    return [path]


class ParquetDataSource(grain.sources.RandomAccessDataSource[dict]):
    """Rows of Parquet files as one random-access source of dicts ``{column: numpy value}``.

    Args:
      paths: a path, URI or glob pattern, or a sequence of them; rows are numbered file after file.
      columns: read only these columns (all files must have them).
      filesystem: an explicit ``pyarrow.fs.FileSystem`` for the paths.
      cache_bytes: bound on the decoded row groups kept in memory (default 256 MiB; at least the
        row group being read is kept).
    """

    def __init__(
        self,
        paths: Any,
        *,
        columns: Sequence[str] | None = None,
        filesystem: Any = None,
        cache_bytes: int = 256 << 20,
    ):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        files = [p for item in paths for p in _expand(os.fspath(item))]
        if not files:
            raise ValueError("ParquetDataSource needs at least one path.")
        self._files = files
        self._filesystem = filesystem
        self._cache_bytes = int(cache_bytes)
        sizes, rg_file, rg_local = [], [], []
        names = None
        for f, path in enumerate(files):
            pf, handle = _io.open_parquet(path, filesystem)
            try:
                cols = _io.check_columns(pf, columns, path)
                if names is None:
                    names = cols
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
        return list(self._files)

    @property
    def column_names(self) -> list[str]:
        return list(self._names)

    def __len__(self) -> int:
        return self._len

    def _out_of_range(self, index: int) -> IndexError:
        return IndexError(
            f"index {index} out of range for ParquetDataSource of length {self._len}."
        )

    def __getitem__(self, record_key) -> dict[str, Any]:
        i = operator.index(record_key)
        j = i + self._len if i < 0 else i
        if not 0 <= j < self._len:
            raise self._out_of_range(i)
        g = int(np.searchsorted(self._rg_ends, j, side="right"))
        cols = self._row_group(g)
        r = j - int(self._rg_starts[g])
        return {n: c[r] for n, c in zip(self._names, cols)}

    def __getitems__(self, record_keys: Sequence[int]) -> list[dict[str, Any]]:
        keys = np.asarray(record_keys, dtype=np.int64).reshape(-1)
        if keys.size == 0:
            return []
        lo, hi = int(keys.min()), int(keys.max())
        if lo < -self._len or hi >= self._len:
            raise self._out_of_range(hi if hi >= self._len else lo)
        if lo < 0:
            keys = np.where(keys < 0, keys + self._len, keys)
        gids = np.searchsorted(self._rg_ends, keys, side="right")
        local = keys - self._rg_starts[gids]
        out: list[Any] = [None] * keys.size
        names = self._names
        order = np.argsort(gids, kind="stable")
        bounds = np.flatnonzero(np.diff(gids[order])) + 1
        for positions in np.split(order, bounds):
            cols = self._row_group(int(gids[positions[0]]))
            rows = local[positions]
            taken = [c[rows] for c in cols]
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
        digest = hashlib.sha1("\n".join(desc + self._names).encode()).hexdigest()[:16]
        shown = desc if len(desc) <= 8 else desc[:4] + ["..."] + desc[-2:]
        return (
            f"ParquetDataSource(len={self._len}, num_files={len(desc)}, digest={digest}, "
            f"columns={self._names}, files={shown})"
        )
