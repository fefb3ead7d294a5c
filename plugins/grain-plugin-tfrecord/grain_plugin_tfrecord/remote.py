"""Reading TFRecord files from any fsspec filesystem (``s3://``, ``gs://``, ``http(s)://``,
``memory://``, or an explicit ``filesystem=``), with the kernel's retry rules.

:class:`RangeFile` is a read-only, seekable file over byte-range reads: it fetches ``block_size``
bytes at a time with :func:`grain_core.filesystems.read_ranges` (transient errors retried with
bounded backoff, a range that keeps failing is an ``OSError`` naming the file and the range) and
holds one block in memory. :class:`RemoteRecordReader` is the plugin's :class:`RecordReader` over
such a file, so records, CRC checks, offsets and error messages are the same as for local files.
"""

from __future__ import annotations

from typing import Any

from grain_core.author import RetryPolicy, file_size, read_ranges, resolve_filesystem
from grain_plugin_tfrecord.format import RecordReader, TFRecordCorruptionError

__all__ = ["BLOCK_SIZE", "RangeFile", "RemoteRecordReader", "open_file", "remote_size"]

BLOCK_SIZE = 8 << 20


class RangeFile:
    """``read`` / ``seek`` / ``tell`` over ``fs``'s ``path`` of ``size`` bytes, one block cached."""

    def __init__(
        self,
        fs: Any,
        path: str,
        size: int,
        *,
        name: str | None = None,
        block_size: int = BLOCK_SIZE,
        retry: RetryPolicy | None = None,
    ):
        self._fs, self._path, self.size, self.name = fs, path, size, name or path
        self._block_size, self._retry = block_size, retry
        self._pos = 0
        self._block_start, self._block = 0, b""
        self.closed = False

    def seek(self, offset: int) -> int:
        self._pos = offset
        return offset

    def tell(self) -> int:
        return self._pos

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes from the current position (fewer only at the end of the file)."""
        if self.closed:
            raise ValueError(f"the file {self.name!r} is closed.")
        end = min(self._pos + n, self.size)
        out = []
        while self._pos < end:
            rel = self._pos - self._block_start
            if not 0 <= rel < len(self._block):
                self._fill(self._pos)
                rel = 0
            piece = self._block[rel : rel + end - self._pos]
            out.append(piece)
            self._pos += len(piece)
        return b"".join(out)

    def _fill(self, start: int) -> None:
        stop = min(start + self._block_size, self.size)
        (data,) = read_ranges(self._fs, self._path, [start], [stop], retry=self._retry)
        if len(data) != stop - start:
            raise TFRecordCorruptionError(
                f"{self.name}: asked bytes [{start}, {stop}) and got {len(data)}: the file is "
                "shorter than its size (it changed while being read)."
            )
        self._block_start, self._block = start, data

    def close(self) -> None:
        self.closed = True
        self._block = b""


def remote_size(fs: Any, path: str, name: str) -> int:
    """The size of ``path`` in ``fs`` (retried), with a clear error for a missing file."""
    try:
        return file_size(fs, path)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"TFRecordIterDataset: no such file: {name}") from e


def open_file(
    path: str, filesystem: Any = None, storage_options: Any = None
) -> tuple[Any, str, int]:
    """``(fs, path inside it, size)`` of a remote TFRecord file."""
    fs, inner = resolve_filesystem(
        path, filesystem, storage_options, "TFRecordIterDataset"
    )
    return fs, inner, remote_size(fs, inner, path)


class RemoteRecordReader(RecordReader):
    """:class:`RecordReader` over a remote file (see the module docstring)."""

    def __init__(
        self,
        path: str,
        offset: int = 0,
        index: int = 0,
        *,
        verify_crc: bool = True,
        filesystem: Any = None,
        storage_options: Any = None,
    ):
        self.path = path
        self.verify_crc = verify_crc
        fs, inner, size = open_file(path, filesystem, storage_options)
        self._file = RangeFile(fs, inner, size, name=path)  # type: ignore[assignment]
        self.offset = 0
        self.index = 0
        self.seek(offset, index)

    def seek(self, offset: int, index: int) -> None:
        size = self._require().size  # type: ignore[attr-defined]
        if not 0 <= offset <= size:
            raise TFRecordCorruptionError(
                f"{self.path}: offset {offset} is outside the file ({size} bytes); the state does "
                "not belong to this file."
            )
        self._require().seek(offset)
        self.offset, self.index = offset, index
