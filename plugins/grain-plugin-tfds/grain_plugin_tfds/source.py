"""``TfdsDataSource``: a TFDS random-access split (``tfds.data_source``) as a grain_core source.

TFDS's own sources already work with ``MapDataset.source``; this wrapper adds what a pipeline wants
from a source: it is pickled by its arguments (the TFDS source is rebuilt lazily in the worker
process, never pickled with open files), its ``repr`` is stable across processes (it identifies the
data in checkpoint fingerprints), bulk reads go through TFDS's ``__getitems__`` when it has one, an index
out of range is an ``IndexError`` (TFDS raises ``ValueError``), and it is a context manager whose
``close()`` waits for the reads in flight before closing TFDS's readers.
"""

from __future__ import annotations

import contextlib
import operator
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, SupportsIndex

import numpy as np

import grain_core as grain
from grain_core.author import check_indices

__all__ = ["TfdsDataSource"]


def _describe(obj: Any) -> str:
    """A description of ``obj`` that is the same in every process (no memory addresses): literals
    and containers of them as written, other objects by their type name."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return repr(obj)
    if isinstance(obj, os.PathLike):
        return repr(os.fspath(obj))
    if isinstance(obj, Mapping):
        items = sorted((str(k), _describe(v)) for k, v in obj.items())
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in items) + "}"
    if isinstance(obj, (list, tuple)):
        inner = ", ".join(_describe(v) for v in obj)
        return f"[{inner}]" if isinstance(obj, list) else f"({inner}{',' if len(obj) == 1 else ''})"
    if type(obj).__repr__ is not object.__repr__ and type(obj).__module__.startswith(
        "tensorflow_datasets"
    ):
        return repr(obj)  # e.g. ReadInstruction('train[:10]')
    return type(obj).__qualname__


def _specs(info: Any) -> Any:
    """``TensorInfo`` leaves of a feature tree (dicts, lists, tuples) as ``ShapeDtypeStruct``."""
    if isinstance(info, Mapping):
        return {k: _specs(v) for k, v in info.items()}
    if isinstance(info, (list, tuple)):
        return type(info)(_specs(v) for v in info)
    dtype = getattr(info, "np_dtype", None)  # TFDS's NumPy dtype (``dtype`` may need TensorFlow)
    if dtype is None:
        dtype = getattr(info.dtype, "as_numpy_dtype", info.dtype)
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        dtype = np.dtype(object)
    if dtype.kind in "SUO":  # tf.string features decode to bytes
        dtype = np.dtype(object)
    return grain.experimental.ShapeDtypeStruct(shape=tuple(info.shape), dtype=dtype)


class TfdsDataSource(grain.sources.RandomAccessDataSource[Any]):
    """Records of the TFDS dataset ``name`` (split ``split``, e.g. ``"train[:50%]"``), decoded.

    Args:
      name: the TFDS dataset name (``"mnist"``, ``"my_dataset/config:1.0.0"``).
      split: a split, with TFDS slicing syntax (or a ``tfds.core.ReadInstruction``).
      data_dir: where the prepared dataset lives (TFDS's default if None).
      decoders: TFDS decoders (e.g. ``{"image": tfds.decode.SkipDecoding()}``).
      **kwargs: passed to ``tfds.data_source`` (``download``, ``builder_kwargs``, ...). The dataset
        must be prepared in a random-access format (``array_record``).

    Contract: the TFDS source is opened at construction (so an unknown dataset or split fails
    here) to learn ``len``; ``source[i]`` is record ``i`` decoded by TFDS; ``__getitems__`` reads
    through TFDS's bulk ``__getitems__`` in the order asked; out-of-range indices raise
    ``IndexError`` naming the length. Thread-safe. Pickled by its arguments (the TFDS source is
    rebuilt lazily after unpickling, e.g. in a worker). ``repr`` names the dataset, split, data_dir,
    decoders (by type) and other arguments, identical in every process.
    """

    def __init__(
        self,
        name: str,
        *,
        split: str | Any = "train",
        data_dir: str | os.PathLike | None = None,
        decoders: Mapping[str, Any] | Any | None = None,
        **kwargs: Any,
    ):
        if not isinstance(name, str) or not name:
            raise TypeError(f"TfdsDataSource: name must be a dataset name string, got {name!r}.")
        if split is None or isinstance(split, (bytes, int, float, list, tuple, dict)):
            raise TypeError(
                "TfdsDataSource: split must be a split string (e.g. 'train[:50%]') or a "
                f"tfds.core.ReadInstruction, got {type(split).__name__}."
            )
        if data_dir is not None and not isinstance(data_dir, (str, os.PathLike)):
            raise TypeError(
                f"TfdsDataSource: data_dir must be a str, os.PathLike or None, got "
                f"{type(data_dir).__name__}."
            )
        self._name = name
        self._split = split
        self._data_dir = None if data_dir is None else os.fspath(data_dir)
        self._decoders = decoders
        self._kwargs = kwargs
        self._init_runtime()
        self._len = len(self._get())

    def _init_runtime(self) -> None:
        # ``_lock`` guards building, counting users of and closing the TFDS source; reads run
        # without it, in parallel.
        self._lock = threading.Condition(threading.Lock())
        self._source = None
        self._users: dict[int, int] = {}  # id(TFDS source) -> reads in flight on it

    def _build(self) -> Any:
        import tensorflow_datasets as tfds

        return tfds.data_source(
            self._name,
            split=self._split,
            data_dir=self._data_dir,
            decoders=self._decoders,
            **self._kwargs,
        )

    def _get(self) -> Any:
        with self._lock:
            if self._source is None:
                self._source = self._build()
            return self._source

    @contextlib.contextmanager
    def _using(self) -> Iterator[Any]:
        """Yields the TFDS source, counted as in use so that ``close()`` waits for the read."""
        with self._lock:
            if self._source is None:
                self._source = self._build()
            src = self._source
            self._users[id(src)] = self._users.get(id(src), 0) + 1
        try:
            yield src
        finally:
            with self._lock:
                left = self._users.pop(id(src)) - 1
                if left:
                    self._users[id(src)] = left
                else:
                    self._lock.notify_all()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_lock", "_source", "_users"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def tfds_source(self) -> Any:
        """The underlying ``tfds.data_source`` object."""
        return self._get()

    @property
    def element_spec(self) -> Any:
        """The spec of a record, from the split's feature description (no record is read): the
        tree of ``features.get_tensor_info()`` as ``ShapeDtypeStruct`` leaves (unknown
        dimensions ``None``; strings Python objects, i.e. ``bytes``). ``MapDataset.source(src)``
        answers ``get_element_spec`` with it.

        Raises:
          NotImplementedError: the source was built with ``decoders`` (what they give is theirs).
        """
        if self._decoders is not None:
            raise NotImplementedError(
                "TfdsDataSource.element_spec: the source was built with decoders=, whose output "
                "the feature description does not give; map the elements with a transform that "
                "has output_spec, or build the source without decoders."
            )
        info = self._get().dataset_info.features.get_tensor_info()
        return _specs(info)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, record_key: SupportsIndex) -> Any:
        """Record ``record_key``, decoded (negative indices count from the end)."""
        i = operator.index(record_key)
        j = i + self._len if i < 0 else i
        if not 0 <= j < self._len:
            raise IndexError(f"index {i} out of range for TfdsDataSource of length {self._len}.")
        with self._using() as src:
            return src[j]

    def __getitems__(self, record_keys: Sequence[int]) -> list[Any]:
        """The records at ``record_keys`` in the order asked, through TFDS's bulk read."""
        keys = check_indices(record_keys, self._len, "TfdsDataSource").tolist()
        if not keys:
            return []
        with self._using() as src:
            bulk = getattr(src, "__getitems__", None)
            if bulk is not None:
                return list(bulk(keys))
            return [src[k] for k in keys]

    def close(self) -> None:
        """Closes TFDS's readers (after the reads in flight); later reads rebuild the source."""
        with self._lock:
            src, self._source = self._source, None
            if src is None:
                return
            self._lock.wait_for(lambda: id(src) not in self._users)
        inner = getattr(src, "data_source", None)  # TFDS wraps array_record's data source
        for obj in (src, inner):
            exit_ = getattr(obj, "__exit__", None)
            if exit_ is not None:
                exit_(None, None, None)
                break

    def __enter__(self) -> TfdsDataSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        extra = "".join(f", {k}={_describe(v)}" for k, v in sorted(self._kwargs.items()))
        return (
            f"TfdsDataSource(name={self._name!r}, split={_describe(self._split)}, "
            f"data_dir={self._data_dir!r}, decoders={_describe(self._decoders)}{extra}, "
            f"len={self._len})"
        )
