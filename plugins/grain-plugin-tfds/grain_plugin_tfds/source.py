"""``TfdsDataSource``: a TFDS random-access split (``tfds.data_source``) as a grain_core source.

TFDS's own sources already work with ``MapDataset.source``; this wrapper adds what a pipeline wants
from a source: it is pickled by its arguments (the TFDS source is rebuilt lazily in the worker
process, never pickled with open files), its ``repr`` is stable across processes (it identifies the
data in checkpoint fingerprints), bulk reads go through TFDS's ``__getitems__`` when it has one, and
it is a context manager.
"""

from __future__ import annotations

import operator
import os
import threading
from collections.abc import Sequence
from typing import Any

import grain_core as grain

__all__ = ["TfdsDataSource"]


class TfdsDataSource(grain.sources.RandomAccessDataSource[Any]):
    """Records of the TFDS dataset ``name`` (split ``split``, e.g. ``"train[:50%]"``), decoded.

    Args:
      name: the TFDS dataset name (``"mnist"``, ``"my_dataset/config:1.0.0"``).
      split: a split, with TFDS slicing syntax.
      data_dir: where the prepared dataset lives (TFDS's default if None).
      decoders: TFDS decoders (e.g. ``{"image": tfds.decode.SkipDecoding()}``).
      **kwargs: passed to ``tfds.data_source`` (``download``, ``builder_kwargs``, ...). The dataset
        must be prepared in a random-access format (``array_record``).
    """

    def __init__(
        self,
        name: str,
        *,
        split: str = "train",
        data_dir: str | os.PathLike | None = None,
        decoders: Any = None,
        **kwargs: Any,
    ):
        if not isinstance(name, str) or not name:
            raise TypeError(f"TfdsDataSource: name must be a dataset name string, got {name!r}.")
        self._name = name
        self._split = split
        self._data_dir = None if data_dir is None else os.fspath(data_dir)
        self._decoders = decoders
        self._kwargs = kwargs
        self._init_runtime()
        self._len = len(self._get())

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._source = None

    def _get(self):
        src = self._source
        if src is None:
            with self._lock:
                if self._source is None:
                    import tensorflow_datasets as tfds

                    self._source = tfds.data_source(
                        self._name,
                        split=self._split,
                        data_dir=self._data_dir,
                        decoders=self._decoders,
                        **self._kwargs,
                    )
                src = self._source
        return src

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_lock", None)
        state.pop("_source", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def tfds_source(self) -> Any:
        """The underlying ``tfds.data_source`` object."""
        return self._get()

    def __len__(self) -> int:
        return self._len

    def _check(self, i: int) -> int:
        j = i + self._len if i < 0 else i
        if not 0 <= j < self._len:
            raise IndexError(f"index {i} out of range for TfdsDataSource of length {self._len}.")
        return j

    def __getitem__(self, record_key) -> Any:
        return self._get()[self._check(operator.index(record_key))]

    def __getitems__(self, record_keys: Sequence[int]) -> list[Any]:
        keys = [self._check(operator.index(k)) for k in record_keys]
        src = self._get()
        bulk = getattr(src, "__getitems__", None)
        if bulk is not None:
            return list(bulk(keys))
        return [src[k] for k in keys]

    def close(self) -> None:
        """Drops the TFDS source (and its open files); later reads rebuild it."""
        with self._lock:
            src, self._source = self._source, None
        if src is not None:
            for closer in ("close", "__exit__"):
                fn = getattr(src, closer, None)
                if fn is not None:
                    try:
                        fn() if closer == "close" else fn(None, None, None)
                    except Exception:
                        pass
                    break

    def __enter__(self) -> TfdsDataSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        dec = None if self._decoders is None else sorted(self._decoders)
        return (
            f"TfdsDataSource(name={self._name!r}, split={self._split!r}, "
            f"data_dir={self._data_dir!r}, decoders={dec}, len={self._len})"
        )
