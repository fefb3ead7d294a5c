"""Opening Parquet files with clear errors, and converting row groups to numpy columns."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq


def resolve(path: Any, filesystem: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    """Returns ``(filesystem, path inside it)`` for a local path, a URI or an explicit filesystem."""
    path = os.fspath(path)
    if filesystem is not None:
        return filesystem, path
    if "://" in path:
        try:
            return pafs.FileSystem.from_uri(path)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise ValueError(f"Parquet: cannot resolve a filesystem for {path!r}: {e}") from e
    return pafs.LocalFileSystem(), os.path.abspath(path)


def open_parquet(
    path: Any, filesystem: pafs.FileSystem | None = None, **kwargs: Any
) -> tuple[pq.ParquetFile, Any]:
    """Opens ``path`` as a ParquetFile. Raises ``FileNotFoundError`` / ``ValueError`` naming it."""
    fs, inner = resolve(path, filesystem)
    try:
        info = fs.get_file_info(inner)
    except OSError as e:
        raise OSError(f"Parquet: cannot stat {os.fspath(path)!r}: {e}") from e
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"Parquet: no such file: {os.fspath(path)!r}.")
    if info.type == pafs.FileType.Directory:
        raise IsADirectoryError(f"Parquet: {os.fspath(path)!r} is a directory, not a Parquet file.")
    handle = fs.open_input_file(inner)
    try:
        return pq.ParquetFile(handle, **kwargs), handle
    except (pa.ArrowInvalid, OSError) as e:
        handle.close()
        raise ValueError(
            f"Parquet: {os.fspath(path)!r} is not a readable Parquet file (not Parquet, or its "
            f"footer is corrupt): {e}"
        ) from e


def check_columns(pf: pq.ParquetFile, columns: Sequence[str] | None, path: Any) -> list[str]:
    """Returns the column names to read; raises ``ValueError`` naming a missing column and the file."""
    names = list(pf.schema_arrow.names)
    if columns is None:
        return names
    if isinstance(columns, str):
        raise TypeError("Parquet: columns must be a list of column names, not a string.")
    missing = [c for c in columns if c not in names]
    if missing:
        raise ValueError(
            f"Parquet: column(s) {missing} not in {os.fspath(path)!r}; it has columns {names}."
        )
    return list(columns)


def table_columns(table: pa.Table) -> list[np.ndarray]:
    """Converts every column of ``table`` to one numpy array (column-wise, in bulk)."""
    out = []
    for col in table.columns:
        try:
            arr = col.to_numpy()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
            arr = np.empty(len(col), dtype=object)
            arr[:] = col.to_pylist()
        out.append(arr)
    return out


def read_row_group(
    pf: pq.ParquetFile, rg: int, columns: list[str], path: Any
) -> tuple[list[np.ndarray], int]:
    """Reads row group ``rg`` as numpy columns; returns them and the decoded Arrow size in bytes."""
    try:
        table = pf.read_row_group(rg, columns=columns)
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"Parquet: cannot read row group {rg} of {os.fspath(path)!r}: {e}") from e
    return table_columns(table), int(table.nbytes)
