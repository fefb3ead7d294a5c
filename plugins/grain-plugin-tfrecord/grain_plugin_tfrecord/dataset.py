"""``TFRecordIterDataset``: the records of one TFRecord file, as ``bytes``, checkpointably.

Grain's ``grain.experimental.TFRecordIterDataset(path)``: iterating yields each record's bytes in
file order (parse them with ``.map``, e.g. ``tf.train.Example.FromString``). Unlike Grain's reader
this one verifies every record's CRCs (``verify_crc=False`` skips that) and reports corruption with
the file name, the record index and the byte offset (:class:`TFRecordCorruptionError`).

Subclasses written for Grain read ``self._path`` (the path as given); Grain's private reader and
iterator classes they subclass are in :mod:`grain_plugin_tfrecord.grain_private`.

State: ``{"kind": "TFRecordIterDataset", "path": path, "reader_offset": byte offset of the next
record, "record_index": its number}``. ``set_state`` also accepts Grain's ``{"reader_offset": n}``
(the record index is then unknown, and error messages count records from there). A state of another
file is refused; a state whose offset is not the start of a record is refused at the next read
(the length CRC does not match). Files are opened when iteration starts and closed by ``close()``,
at the end of the file, and when the iterator is collected.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from grain_core import DatasetIterator, IterDataset
from grain_core.author import (
    StateMismatchError,
    check_filesystem_args,
    expect_state,
    is_local,
    make_state,
)
from grain_plugin_tfrecord import remote
from grain_plugin_tfrecord.format import RecordReader, TFRecordCorruptionError

__all__ = ["TFRecordCorruptionError", "TFRecordIterDataset"]

_KIND = "TFRecordIterDataset"


class TFRecordIterDataset(IterDataset):
    """The records of the TFRecord file ``path`` (see the module docstring).

    ``path`` may be a URL (``s3://``, ``gs://``, ``http(s)://``, ``memory://``...) read through
    fsspec, or a path inside ``filesystem=`` (an fsspec or pyarrow filesystem); ``storage_options=``
    configure a URL's default filesystem (one of the two). Remote files are read in 8 MiB range
    reads, retried on transient errors (``grain_plugin_tfrecord.remote``); a missing remote file
    (or a URL whose protocol fsspec does not know) is a ``FileNotFoundError`` here, as for local
    files."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        verify_crc: bool = True,
        filesystem: Any = None,
        storage_options: Mapping[str, Any] | None = None,
    ):
        super().__init__()
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"TFRecordIterDataset takes the path of one TFRecord file, got "
                f"{type(path).__name__}; for several files, interleave one dataset per file."
            )
        self._path = os.fspath(path)
        check_filesystem_args(filesystem, storage_options, "TFRecordIterDataset")
        self._fs_args = (filesystem, None if storage_options is None else dict(storage_options))
        local = is_local(self._path, filesystem) and "://" not in self._path
        # A subclass with its own __iter__ reads self._path itself (Grain's contract; MaxText's
        # GCS reader opens gs:// paths), so only the reader here needs a local file.
        own_reader = type(self).__iter__ is TFRecordIterDataset.__iter__
        if own_reader and not local:  # a missing remote file (or unknown protocol) fails here too
            try:
                remote.open_file(self._path, *self._fs_args)
            except ValueError as e:
                raise FileNotFoundError(f"TFRecordIterDataset: cannot open {self._path}: {e}") from e
        if local and own_reader and not os.path.isfile(self._path):
            raise FileNotFoundError(f"TFRecordIterDataset: no such file: {self._path}")
        self._verify = bool(verify_crc)

    @property
    def path(self) -> str:
        return self._path

    def __iter__(self) -> DatasetIterator:
        return _TFRecordIterator(self._path, self._verify, self._fs_args)

    def __repr__(self) -> str:
        return f"TFRecordIterDataset({self._path!r})"

    @property
    def _element_spec(self) -> Any:
        """Each element is one record's ``bytes``: a scalar of object dtype (as batching stacks
        ``bytes`` into object arrays)."""
        import numpy as np

        import grain_core as grain

        return grain.experimental.ShapeDtypeStruct(shape=(), dtype=np.dtype(object))


class _TFRecordIterator(DatasetIterator):
    def __init__(self, path: str, verify: bool, fs_args: tuple[Any, Any] = (None, None)):
        super().__init__()
        self._path = path
        self._fs_args = fs_args
        self._remote = not (is_local(path, fs_args[0]) and "://" not in path)
        self._verify = verify
        self._reader: RecordReader | None = None
        self._offset = 0
        self._index: int | None = 0
        self._done = False

    def _open(self) -> RecordReader:
        if self._reader is None and self._remote:
            self._reader = remote.RemoteRecordReader(
                self._path,
                self._offset,
                self._index or 0,
                verify_crc=self._verify,
                filesystem=self._fs_args[0],
                storage_options=self._fs_args[1],
            )
        if self._reader is None:
            self._reader = RecordReader(
                self._path, self._offset, self._index or 0, verify_crc=self._verify
            )
        return self._reader

    def __next__(self) -> bytes:
        if self._done:
            raise StopIteration
        reader = self._open()
        record = reader.next_record()
        if record is None:
            self._done = True
            self.close()
            raise StopIteration
        self._offset = reader.offset
        if self._index is not None:
            self._index += 1
        return record

    def get_state(self) -> dict[str, Any]:
        return make_state(
            _KIND, path=self._path, reader_offset=self._offset, record_index=self._index
        )

    def set_state(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping):
            raise TypeError(
                f"set_state expects the dict returned by get_state(), got {type(state).__name__}."
            )
        if "kind" in state:
            expect_state(state, _KIND, ("reader_offset",), path=self._path)
            index = state.get("record_index")
        elif "reader_offset" in state:  # Grain's state
            index = None
        else:
            raise StateMismatchError(
                f"A TFRecordIterDataset state needs 'reader_offset'; got keys {sorted(state)}."
            )
        offset = state["reader_offset"]
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise StateMismatchError(
                f"reader_offset must be an int >= 0, got {offset!r}."
            )
        size = (
            remote.open_file(self._path, *self._fs_args)[2]
            if self._remote
            else os.path.getsize(self._path)
        )
        if offset > size:
            raise StateMismatchError(
                f"reader_offset {offset} is past the end of {self._path} ({size} bytes): the state "
                "belongs to another file."
            )
        if index is not None and (
            isinstance(index, bool) or not isinstance(index, int) or index < 0
        ):
            raise StateMismatchError(
                f"record_index must be an int >= 0, got {index!r}."
            )
        self.close()
        self._offset, self._index, self._done = offset, index, False

    def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
