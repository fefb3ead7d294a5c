"""``ParquetIterDataset``: the rows of one Parquet file, read row group by row group."""

from __future__ import annotations

import os
from typing import Any

import grain_core as grain
from grain_core import state as _state
from grain_plugin_parquet import _io

__all__ = ["ParquetIterDataset"]

_KIND = "ParquetIterDataset"


class ParquetIterDataset(grain.IterDataset):
    """Rows of the Parquet file ``path`` as dicts ``{column: numpy value}``, in file order.

    ``path`` is a local path or a URI any PyArrow filesystem understands (``s3://``, ``gs://``,
    ``file://``, ...), or a path inside an explicit ``filesystem=``. Other keyword arguments:
    ``columns=[...]`` reads only those columns; the rest go to ``pyarrow.parquet.ParquetFile``
    (e.g. ``buffer_size``, ``pre_buffer``). The file's footer is read at construction (so a missing
    or broken file fails here, naming it); rows are decoded one row group at a time, column-wise.

    The iterator's state is ``{row_group, row}``: restoring reads only the row group it points to.
    """

    def __init__(self, path: Any, **read_kwargs: Any):
        super().__init__()
        self._path = os.fspath(path)
        self._filesystem = read_kwargs.pop("filesystem", None)
        columns = read_kwargs.pop("columns", None)
        self._read_kwargs = read_kwargs
        pf, handle = _io.open_parquet(self._path, self._filesystem, **read_kwargs)
        try:
            self._columns = _io.check_columns(pf, columns, self._path)
            meta = pf.metadata
            self._rows_per_group = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        finally:
            handle.close()

    @property
    def path(self) -> str:
        return self._path

    @property
    def num_rows(self) -> int:
        """Rows in the file."""
        return sum(self._rows_per_group)

    def _open(self):
        return _io.open_parquet(self._path, self._filesystem, **self._read_kwargs)

    def __iter__(self) -> _ParquetIterator:
        return _ParquetIterator(self)

    def __str__(self) -> str:
        return f"ParquetIterDataset(path={self._path!r}, columns={self._columns})"

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
        return _state.make_state(_KIND, path=self._ds._path, row_group=self._rg, row=self._row)

    def set_state(self, state: dict[str, Any]) -> None:
        _state.expect_state(state, _KIND, ("row_group", "row"), path=self._ds._path)
        rg, row = int(state["row_group"]), int(state["row"])
        if not (0 <= rg <= len(self._sizes)) or row < 0:
            raise _state.StateMismatchError(
                f"ParquetIterDataset state points at row group {rg}, row {row}, but "
                f"{self._ds._path!r} has {len(self._sizes)} row groups."
            )
        self._rg, self._row, self._rows = rg, row, None

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self._pf = self._handle = None
        self._rows = None
        super().close()

    def __str__(self) -> str:
        return f"ParquetIterDataset iterator ({self._ds._path!r})"
