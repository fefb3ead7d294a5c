"""Grain's private TFRecord classes, for code that subclasses them.

Grain 0.2.18's ``grain._src.python.dataset.sources.tfrecord_dataset`` defines ``_TFRecordReader``
and ``_TFRecordDatasetIterator``, and public code subclasses both (MaxText's GCS reader). Under the
``import grain`` alias (``grain_core.compat``) that path resolves to these classes, which keep
Grain's contract, private attributes included:

* :class:`TFRecordReader` (``_TFRecordReader``): ``__init__(path)`` sets ``self._reader`` to the
  file opened in binary mode. Everything else reads only ``self._reader``, so a subclass may skip
  ``__init__`` and set ``self._reader`` to any binary file object with ``read``, ``seek`` and
  ``tell`` (a GCS blob reader, ``io.BytesIO``). ``next(reader)`` returns the next record's bytes
  and raises ``StopIteration`` at the end; ``seek(offset)`` / ``tell()`` move and report the
  byte offset of the next record. Unlike Grain, both CRCs of every record are verified: a
  truncated or corrupted record raises :class:`~grain_plugin_tfrecord.TFRecordCorruptionError`
  (a ``ValueError``, as Grain raises for a truncated one) naming the offset. ``close()`` (also on
  collection) closes ``self._reader``.
* :class:`TFRecordDatasetIterator` (``_TFRecordDatasetIterator``): ``__init__(path)`` calls
  ``DatasetIterator.__init__`` and sets ``self._reader = TFRecordReader(path)``; ``__next__``
  returns ``next(self._reader)``; ``get_state()`` is Grain's ``{"reader_offset": tell()}`` and
  ``set_state`` seeks there, so its states and Grain's are the same. A subclass may call
  ``DatasetIterator.__init__(self)`` itself and set ``self._reader`` to its own reader.
  ``close()`` closes the reader; ``next()`` afterwards raises ``ValueError``.

``TFRecordIterDataset`` (the public class) keeps ``self._path``, which Grain subclasses read in
their ``__iter__``.
"""

from __future__ import annotations

import os
import struct
from typing import Any

from grain_core import DatasetIterator
from grain_core.author import StateMismatchError
from grain_plugin_tfrecord.format import TFRecordCorruptionError, masked_crc32c

__all__ = ["TFRecordDatasetIterator", "TFRecordReader"]

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")


class TFRecordReader:
    """Grain's ``_TFRecordReader`` over the binary file object ``self._reader`` (module docstring)."""

    _reader: Any

    def __init__(self, path: str | os.PathLike):
        self._reader = open(os.fspath(path), "rb")  # noqa: SIM115 - closed by close()

    def _corrupt(self, offset: int, what: str) -> TFRecordCorruptionError:
        name = getattr(self._reader, "name", type(self._reader).__name__)
        return TFRecordCorruptionError(
            f"Not a valid TFRecord: {name}: the record at byte offset {offset} {what}"
        )

    def __next__(self) -> bytes:
        offset = self._reader.tell()
        header = self._reader.read(_HEADER.size)
        if not header:
            raise StopIteration
        if len(header) != _HEADER.size:
            raise self._corrupt(
                offset, f"is truncated (fewer than {_HEADER.size} bytes of header: {header.hex()})."
            )
        length, length_crc = _HEADER.unpack(header)
        if masked_crc32c(header[:8]) != length_crc:
            raise self._corrupt(
                offset,
                "has a length field whose CRC does not match: the file is corrupted, compressed, "
                "or the offset is not the start of a record.",
            )
        body = self._reader.read(length + _FOOTER.size)
        if len(body) != length + _FOOTER.size:
            raise self._corrupt(
                offset, f"is truncated (fewer than {length + _FOOTER.size} bytes of data and CRC)."
            )
        data = bytes(body[:length])
        if masked_crc32c(data) != _FOOTER.unpack_from(body, length)[0]:
            raise self._corrupt(offset, "has data whose CRC does not match.")
        return data

    def __iter__(self) -> TFRecordReader:
        return self

    def seek(self, offset: int) -> None:
        self._reader.seek(offset)

    def tell(self) -> int:
        return self._reader.tell()

    def close(self) -> None:
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class TFRecordDatasetIterator(DatasetIterator):
    """Grain's ``_TFRecordDatasetIterator``: the records of one file (module docstring)."""

    _reader: Any

    def __init__(self, path: str | os.PathLike):
        super().__init__()
        self._reader = TFRecordReader(path)

    def __next__(self) -> bytes:
        return next(self._reader)

    def get_state(self) -> dict[str, Any]:
        return {"reader_offset": self._reader.tell()}

    def set_state(self, state: dict[str, Any]) -> None:
        offset = state.get("reader_offset") if isinstance(state, dict) else None
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise StateMismatchError(
                f"A TFRecord iterator state is {{'reader_offset': int >= 0}}, got {state!r}."
            )
        self._reader.seek(offset)

    def close(self) -> None:
        reader = getattr(self, "_reader", None)
        if reader is not None and hasattr(reader, "close"):
            reader.close()
        super().close()
