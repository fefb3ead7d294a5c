"""``ParquetIterDataset``: the rows of one Parquet file, read row group by row group."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import grain_core as grain
from grain_core.author import StateMismatchError, check_int, expect_state, make_state
from grain_plugin_parquet import _io

__all__ = ["ParquetIterDataset"]

_KIND = "ParquetIterDataset"
_CYCLE_LENGTH = 16  # files read at once from a list of paths, as in Grain


class ParquetIterDataset(grain.IterDataset):
    """Rows of the Parquet file ``path`` as dicts ``{column: numpy value}``, in file order.

    ``path`` is a local path or a URI any PyArrow filesystem understands (``s3://``, ``gs://``,
    ``file://``, ...), or a path inside an explicit ``filesystem=``. Other keyword arguments:
    ``columns=[...]`` reads only those columns; the rest go to ``pyarrow.parquet.ParquetFile``
    (e.g. ``buffer_size``, ``pre_buffer``). The file's footer is read at construction (so a missing
    or broken file fails here, naming it); rows are decoded one row group at a time, column-wise.

    ``filesystem`` may be any ``pyarrow.fs.FileSystem`` (e.g. ``SubTreeFileSystem``) or an fsspec
    filesystem (wrapped with ``pyarrow.fs.FSSpecHandler``); ``storage_options`` (instead) configure
    the URL's fsspec filesystem, and URLs PyArrow does not know (``http(s)://``, ``memory://``) are
    read through fsspec.

    Values: numeric columns give numpy scalars, strings ``str``, binaries ``bytes``, lists numpy
    arrays; a numeric column with nulls is read as float with NaN (PyArrow's ``to_numpy``).

    The iterator's state is ``{row_group, row}``: restoring reads only the row group it points to.
    An iterator holds the file open while it reads and closes it when exhausted or closed.

    Raises:
      TypeError: a ``path`` / ``filesystem`` / ``columns`` of the wrong type, or an unknown option.
      FileNotFoundError, ValueError: a missing file; not Parquet, a corrupt footer, or a missing
        column; each naming the file.
    """

    def __init__(self, path: str | os.PathLike | Sequence[str | os.PathLike], **read_kwargs: Any):
        super().__init__()
        self._files: list[ParquetIterDataset] | None = None
        if isinstance(path, Sequence) and not isinstance(path, (str, bytes)):
            # As in Grain: several files are interleaved, up to 16 at a time, one row each in turn.
            paths = list(path)
            if not paths:
                raise ValueError("ParquetIterDataset: got an empty list of paths; pass at least one.")
            if len(paths) > 1:
                self._files = [ParquetIterDataset(p, **read_kwargs) for p in paths]
                self._path = [f.path for f in self._files]
                self._columns = self._files[0]._columns
                self._rows_per_group = [n for f in self._files for n in f._rows_per_group]
                # A column whose spec differs between files (nulls in some): object dtype.
                specs = [f._spec for f in self._files]
                self._spec = {
                    c: specs[0][c] if all(x[c] == specs[0][c] for x in specs)
                    else grain.experimental.ShapeDtypeStruct(shape=(), dtype=object)
                    for c in self._columns
                }
                return
            path = paths[0]
        self._path = _io.check_path(path, "ParquetIterDataset")
        self._filesystem, (self._path,) = _io.filesystem_and_paths(
            [self._path],
            read_kwargs.pop("filesystem", None),
            read_kwargs.pop("storage_options", None),
            "ParquetIterDataset",
        )
        columns = read_kwargs.pop("columns", None)
        self._read_kwargs = read_kwargs
        pf, handle = _io.open_parquet(self._path, self._filesystem, **read_kwargs)
        try:
            self._columns = _io.check_columns(pf, columns, self._path)
            nullable = _io.null_columns(pf, self._columns)
            self._spec = _io.element_spec(pf, self._columns, nullable)
            meta = pf.metadata
            self._rows_per_group = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        finally:
            handle.close()

    @property
    def path(self) -> str | list[str]:
        """The path (or URI) as given; a list for several files."""
        return self._path

    @property
    def column_names(self) -> list[str]:
        """The columns each row holds."""
        return list(self._columns)

    @property
    def num_rows(self) -> int:
        """Rows in the file."""
        return sum(self._rows_per_group)

    @property
    def _element_spec(self) -> Any:
        """``{column: ShapeDtypeStruct}`` from the file's schema (read at construction, no rows):
        numbers their numpy dtype, lists of numbers ``(None,)`` arrays; strings, binaries, other
        types and integer or bool columns that may hold nulls (whose rows are float in row groups
        with nulls and integers in the others) object dtype."""
        return dict(self._spec)

    def _open(self):
        return _io.open_parquet(self._path, self._filesystem, **self._read_kwargs)

    def __iter__(self) -> grain.DatasetIterator:
        if self._files is not None:
            interleaved = grain.experimental.InterleaveIterDataset(
                self._files, cycle_length=_CYCLE_LENGTH
            )
            return iter(interleaved)
        return _ParquetIterator(self)

    def __str__(self) -> str:
        if self._files is not None:
            return f"ParquetIterDataset(path={self._path!r}, columns={self._columns})"
        fs = _io.describe_filesystem(self._filesystem)
        where = "" if fs is None else f", filesystem={fs!r}"
        return f"ParquetIterDataset(path={self._path!r}{where}, columns={self._columns})"

    __repr__ = __str__


class _ParquetIterator(grain.DatasetIterator):
    def __init__(self, ds: ParquetIterDataset):
        super().__init__()
        self._ds = ds
        self._names = ds._columns
        self._sizes = ds._rows_per_group
        self._pf = None
        self._handle = None
        self._rg = 0
        self._row = 0
        self._rows = None  # iterator over value tuples of the current row group, from self._row

    def _load(self) -> None:
        if self._pf is None:
            self._pf, self._handle = self._ds._open()
        cols, _ = _io.read_row_group(self._pf, self._rg, self._names, self._ds._path)
        if self._row:
            cols = [c[self._row :] for c in cols]
        self._rows = zip(*cols) if cols else iter([()] * (self._sizes[self._rg] - self._row))

    def __next__(self) -> dict[str, Any]:
        while True:
            if self._rows is None:
                while self._rg < len(self._sizes) and self._row >= self._sizes[self._rg]:
                    self._rg += 1
                    self._row = 0
                if self._rg >= len(self._sizes):
                    self._release()  # exhausted: do not hold the file open until close/GC
                    raise StopIteration
                self._load()
            values = next(self._rows, None)
            if values is None:
                self._rows = None
                self._rg += 1
                self._row = 0
                continue
            self._row += 1
            return dict(zip(self._names, values))

    def get_state(self) -> dict[str, Any]:
        return make_state(_KIND, path=self._ds._path, row_group=self._rg, row=self._row)

    def set_state(self, state: dict[str, Any]) -> None:
        expect_state(state, _KIND, ("row_group", "row"), path=self._ds._path)
        rg = check_int(state["row_group"], "ParquetIterDataset state row_group")
        row = check_int(state["row"], "ParquetIterDataset state row")
        size = self._sizes[rg] if rg < len(self._sizes) else 0
        if rg > len(self._sizes) or row > size:
            raise StateMismatchError(
                f"ParquetIterDataset state points at row group {rg}, row {row}, but "
                f"{self._ds._path!r} has {len(self._sizes)} row groups"
                + (f" and row group {rg} has {size} rows." if rg < len(self._sizes) else ".")
            )
        self._rg, self._row, self._rows = rg, row, None

    def _release(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self._pf = self._handle = None
        self._rows = None

    def close(self) -> None:
        """Closes the file; a later ``next`` reopens it (from the current position)."""
        self._release()
        super().close()

    def __str__(self) -> str:
        return f"ParquetIterDataset iterator ({self._ds._path!r})"
