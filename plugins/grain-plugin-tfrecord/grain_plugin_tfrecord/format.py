"""The TFRecord file format, read and written without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64  length                      little-endian
    uint32  masked_crc32c(length bytes) little-endian
    bytes   data[length]
    uint32  masked_crc32c(data)         little-endian

``crc32c`` is the Castagnoli CRC (as in iSCSI) and ``masked_crc32c(b) = ((c >> 15) | (c << 17)) +
0xA282EAD8`` (mod 2**32) with ``c = crc32c(b)``. An empty file holds no records; a record may be
empty (``length == 0``).

:class:`RecordReader` reads records one after another from a byte offset, verifying both CRCs of
every record; a truncated file, a length CRC mismatch (also what a misplaced offset or a compressed
file gives) or a data CRC mismatch raises :class:`TFRecordCorruptionError` naming the file, the
record index and the byte offset. :class:`TFRecordWriter` writes the same framing.

CRC32C comes from ``google-crc32c`` (C, hardware accelerated where available); without it a pure
Python implementation is used (correct, but slow on large records).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from typing import IO, Any

__all__ = [
    "RecordReader",
    "TFRecordCorruptionError",
    "TFRecordWriter",
    "crc32c",
    "masked_crc32c",
    "read_records",
    "write_tfrecords",
]

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
_M32 = 0xFFFFFFFF


def _make_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def crc32c_python(data: bytes | memoryview) -> int:
    """CRC32C of ``data`` in pure Python (the fallback; also used to cross-check)."""
    c = _M32
    table = _TABLE
    for b in bytes(data):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ _M32


try:  # pragma: no branch - depends on the environment
    import google_crc32c as _gcrc

    def crc32c(data: bytes | memoryview) -> int:
        """CRC32C (Castagnoli) of ``data``."""
        return _gcrc.value(bytes(data))

except ImportError:  # pragma: no cover
    crc32c = crc32c_python


def masked_crc32c(data: bytes | memoryview) -> int:
    """The masked CRC32C TFRecord stores for ``data``."""
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & _M32) + _MASK_DELTA) & _M32


class TFRecordCorruptionError(ValueError):
    """A TFRecord file is truncated, corrupted, or not a TFRecord file at the given offset."""


class RecordReader:
    """Reads the records of one TFRecord file from a byte offset, verifying CRCs.

    ``offset`` is the byte position of the next record and ``index`` its number in the file (both
    advance with each record). Open files are closed by :meth:`close` (also as a context manager).
    """

    def __init__(
        self, path: str | os.PathLike, offset: int = 0, index: int = 0, *, verify_crc: bool = True
    ):
        self.path = os.fspath(path)
        self.verify_crc = verify_crc
        self._file: IO[bytes] | None = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        self.offset = 0
        self.index = 0
        self.seek(offset, index)

    def seek(self, offset: int, index: int) -> None:
        """Moves to the record starting at byte ``offset``, record number ``index``."""
        size = os.fstat(self._require().fileno()).st_size
        if not 0 <= offset <= size:
            raise TFRecordCorruptionError(
                f"{self.path}: offset {offset} is outside the file ({size} bytes); the state does "
                "not belong to this file."
            )
        self._require().seek(offset)
        self.offset, self.index = offset, index

    def _require(self) -> IO[bytes]:
        if self._file is None:
            raise ValueError(f"The reader of {self.path} was closed.")
        return self._file

    def _error(self, what: str) -> TFRecordCorruptionError:
        return TFRecordCorruptionError(
            f"{self.path}: record {self.index} (at byte offset {self.offset}) {what}"
        )

    def next_record(self) -> bytes | None:
        """The next record's data, or None at the end of the file."""
        f = self._require()
        header = f.read(_HEADER.size)
        if not header:
            return None
        if len(header) < _HEADER.size:
            raise self._error(
                f"is truncated: {len(header)} header bytes where 12 are needed (the file ends "
                "inside a record header)."
            )
        length, length_crc = _HEADER.unpack(header)
        if self.verify_crc and masked_crc32c(header[:8]) != length_crc:
            hint = ""
            if header[:2] == b"\x1f\x8b":
                hint = " The file looks GZIP-compressed; decompress it first."
            raise self._error(
                "has a corrupted length field (its CRC does not match): the file is corrupted, "
                f"or this offset is not the start of a record.{hint}"
            )
        body = f.read(length + _FOOTER.size)
        if len(body) < length + _FOOTER.size:
            raise self._error(
                f"is truncated: the header says {length} data bytes, but the file ends after "
                f"{max(0, len(body) - 0)} of the {length + 4} bytes of data and CRC."
            )
        data = body[:length]
        if self.verify_crc and masked_crc32c(data) != _FOOTER.unpack_from(body, length)[0]:
            raise self._error("has corrupted data (its CRC does not match).")
        self.offset += _HEADER.size + length + _FOOTER.size
        self.index += 1
        return data

    def __iter__(self) -> Iterator[bytes]:
        while (rec := self.next_record()) is not None:
            yield rec

    def close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            f.close()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def read_records(path: str | os.PathLike, *, verify_crc: bool = True) -> list[bytes]:
    """Every record of the TFRecord file ``path``."""
    with RecordReader(path, verify_crc=verify_crc) as r:
        return list(r)


def _as_bytes(record: Any) -> bytes:
    if isinstance(record, str):
        raise TypeError("TFRecord records are bytes; encode strings first (e.g. s.encode()).")
    return bytes(record)


class TFRecordWriter:
    """Writes records to a new TFRecord file at ``path`` (a context manager; ``close`` flushes)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._file: IO[bytes] | None = open(self.path, "wb")  # noqa: SIM115 - closed by close()

    def write(self, record: bytes | bytearray | memoryview) -> None:
        """Appends one record."""
        if self._file is None:
            raise ValueError(f"The writer of {self.path} was closed.")
        data = _as_bytes(record)
        length = struct.pack("<Q", len(data))
        self._file.write(length + _FOOTER.pack(masked_crc32c(length)))
        self._file.write(data)
        self._file.write(_FOOTER.pack(masked_crc32c(data)))

    def close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            f.close()

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_tfrecords(path: str | os.PathLike, records: Iterable[bytes]) -> int:
    """Writes ``records`` to the TFRecord file ``path``; returns how many were written."""
    n = 0
    with TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
            n += 1
    return n
