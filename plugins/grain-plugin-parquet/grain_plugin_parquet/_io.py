"""Opening Parquet files with clear errors, and converting row groups to numpy columns."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from grain_core.author import check_filesystem_args, resolve_filesystem


def check_path(path: Any, who: str) -> str:
    """``path`` as a ``str`` (a ``str`` or ``os.PathLike`` of one); ``TypeError`` otherwise."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"{who}: a path must be a str or os.PathLike, got {type(path).__name__}.")
    if not path:
        raise ValueError(f"{who}: the path is empty.")
    return path


def check_filesystem(filesystem: Any, who: str) -> pafs.FileSystem | None:
    """``None``, a ``pyarrow.fs.FileSystem``, or an fsspec filesystem (wrapped for PyArrow)."""
    if filesystem is None or isinstance(filesystem, pafs.FileSystem):
        return filesystem
    try:
        import fsspec
    except ImportError:
        fsspec = None
    if fsspec is not None and isinstance(filesystem, fsspec.AbstractFileSystem):
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    raise TypeError(
        f"{who}: filesystem must be a pyarrow.fs.FileSystem or an fsspec filesystem, got "
        f"{type(filesystem).__name__}."
    )


def filesystem_and_paths(
    paths: list[str], filesystem: Any, storage_options: Any, who: str
) -> tuple[pafs.FileSystem | None, list[str]]:
    """The one ``filesystem=`` / ``storage_options=`` rule of every file source (see
    :mod:`grain_core.filesystems`): with ``storage_options``, the URLs' fsspec filesystem built with
    them becomes the explicit filesystem and the paths become paths inside it."""
    check_filesystem_args(filesystem, storage_options, who)
    if storage_options is None or not paths:
        return check_filesystem(filesystem, who), paths
    fs, _ = resolve_filesystem(paths[0], None, storage_options, who)
    return check_filesystem(fs, who), [fs._strip_protocol(p) for p in paths]


def describe_filesystem(filesystem: pafs.FileSystem | None) -> str | None:
    """A process-independent description of an explicit filesystem, for ``repr``."""
    if filesystem is None:
        return None
    base = getattr(filesystem, "base_path", None)  # SubTreeFileSystem
    inner = getattr(filesystem, "base_fs", None)
    if base is not None:
        return f"{filesystem.type_name}:{base}" + (f"@{inner.type_name}" if inner else "")
    return filesystem.type_name


def resolve(path: str, filesystem: pafs.FileSystem | None) -> tuple[pafs.FileSystem, str]:
    """Returns ``(filesystem, path inside it)`` for a local path, a URI or an explicit filesystem."""
    if filesystem is not None:
        return filesystem, path
    if "://" in path:
        try:
            return pafs.FileSystem.from_uri(path)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            arrow_error = e
        # A URL PyArrow does not know (http(s)://, memory://, ...): fsspec's filesystem for it.
        try:
            fs, inner = resolve_filesystem(path, who="Parquet")
        except (ValueError, ImportError) as e:
            raise ValueError(
                f"Parquet: cannot resolve a filesystem for {path!r}: {arrow_error}; {e}"
            ) from e
        return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), inner
    return pafs.LocalFileSystem(), os.path.abspath(path)


def open_parquet(
    path: str, filesystem: pafs.FileSystem | None = None, **kwargs: Any
) -> tuple[pq.ParquetFile, Any]:
    """Opens ``path`` as a ParquetFile and returns it with its file handle (the caller closes it).

    Raises ``FileNotFoundError`` (missing), ``IsADirectoryError``, ``ValueError`` (not Parquet or a
    corrupt footer) or ``TypeError`` (an option ``ParquetFile`` does not take), each naming ``path``.
    The handle is closed when opening fails."""
    fs, inner = resolve(path, filesystem)
    try:
        info = fs.get_file_info(inner)
    except OSError as e:
        raise OSError(f"Parquet: cannot stat {path!r}: {e}") from e
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"Parquet: no such file: {path!r}.")
    if info.type == pafs.FileType.Directory:
        raise IsADirectoryError(f"Parquet: {path!r} is a directory, not a Parquet file.")
    handle = fs.open_input_file(inner)
    try:
        return pq.ParquetFile(handle, **kwargs), handle
    except (pa.ArrowInvalid, OSError) as e:
        handle.close()
        raise ValueError(
            f"Parquet: {path!r} is not a readable Parquet file (not Parquet, or its "
            f"footer is corrupt): {e}"
        ) from e
    except TypeError as e:
        handle.close()
        raise TypeError(f"Parquet: bad read option for {path!r}: {e}") from e
    except BaseException:
        handle.close()
        raise


def check_columns(pf: pq.ParquetFile, columns: Sequence[str] | None, path: str) -> list[str]:
    """Returns the column names to read; raises ``ValueError`` naming a missing column and the file."""
    names = list(pf.schema_arrow.names)
    if columns is None:
        return names
    if isinstance(columns, str):
        raise TypeError("Parquet: columns must be a list of column names, not a string.")
    try:
        columns = list(columns)
    except TypeError:
        raise TypeError(
            f"Parquet: columns must be a list of column names, got {type(columns).__name__}."
        ) from None
    if not all(isinstance(c, str) for c in columns):
        raise TypeError(f"Parquet: column names must be strings, got {columns!r}.")
    missing = [c for c in columns if c not in names]
    if missing:
        raise ValueError(
            f"Parquet: column(s) {missing} not in {path!r}; it has columns {names}."
        )
    return columns


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
    pf: pq.ParquetFile, rg: int, columns: list[str], path: str
) -> tuple[list[np.ndarray], int]:
    """Reads row group ``rg`` as numpy columns; returns them and an estimate of their memory in
    bytes (the decoded Arrow size, plus 64 bytes per Python object in object columns)."""
    try:
        table = pf.read_row_group(rg, columns=columns)
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"Parquet: cannot read row group {rg} of {path!r}: {e}") from e
    cols = table_columns(table)
    extra = sum(64 * len(c) for c in cols if c.dtype == object)
    return cols, int(table.nbytes) + extra


def null_columns(pf: pq.ParquetFile, columns: list[str]) -> set[str]:
    """The columns that may hold nulls in ``pf`` (a null count above 0 in a row group's
    statistics, or no statistics for a nullable column)."""
    meta, schema = pf.metadata, pf.schema_arrow
    out = set()
    for name in columns:
        idx = pf.schema.names.index(name) if name in pf.schema.names else None
        for g in range(meta.num_row_groups):
            if idx is None:
                out.add(name)
                break
            stats = meta.row_group(g).column(idx).statistics
            if stats is None or not stats.has_null_count:
                if schema.field(name).nullable:
                    out.add(name)
                    break
            elif stats.null_count > 0:
                out.add(name)
                break
    return out


def _leaf_spec(typ: pa.DataType, nullable: bool) -> tuple[tuple[int | None, ...], np.dtype]:
    """The shape and dtype of one row's value of an Arrow column (as ``table_columns`` gives it)."""
    obj = np.dtype(object)
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        dtype = np.dtype(typ.to_pandas_dtype())
        # An integer column holding nulls gives float64 (NaN) rows from row groups with nulls and
        # integer rows from the others: no single dtype, so Python objects.
        return (), (obj if nullable and pa.types.is_integer(typ) else dtype)
    if pa.types.is_boolean(typ):
        return (), (obj if nullable else np.dtype(bool))
    if pa.types.is_timestamp(typ) or pa.types.is_date64(typ) or pa.types.is_duration(typ):
        try:
            return (), np.dtype(typ.to_pandas_dtype())
        except (NotImplementedError, TypeError):
            return (), obj
    if pa.types.is_fixed_size_list(typ) or pa.types.is_list(typ) or pa.types.is_large_list(typ):
        inner, dtype = _leaf_spec(typ.value_type, False)
        size = typ.list_size if pa.types.is_fixed_size_list(typ) else None
        if inner == () and dtype != obj:
            return (size,), dtype
        return (), obj
    return (), obj  # strings, binaries, structs, maps, ...: Python objects


def element_spec(pf: pq.ParquetFile, columns: list[str], nullable: set[str]) -> dict[str, Any]:
    """``{column: ShapeDtypeStruct}`` of the rows ``table_columns`` gives for ``pf``'s ``columns``
    (an integer or bool column that may hold nulls is of object dtype: its rows' dtype differs
    between row groups with and without nulls)."""
    import grain_core as grain

    schema = pf.schema_arrow
    out = {}
    for name in columns:
        shape, dtype = _leaf_spec(schema.field(name).type, name in nullable)
        out[name] = grain.experimental.ShapeDtypeStruct(shape=shape, dtype=dtype)
    return out
