"""``HuggingFaceDataSource``: a ``datasets.Dataset`` as a random-access grain_core source.

A chunk of indices is read with one Arrow ``take`` on the dataset's table (through its indices
mapping, so ``select`` / ``shuffle`` / ``filter`` / ``train_test_split`` views are respected) and
turned into rows column by column, instead of one ``dataset[i]`` per row through Python.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, SupportsIndex

import numpy as np

import grain_core as grain
from grain_core.author import check_indices
from grain_plugin_hf import _rows

__all__ = ["HuggingFaceDataSource"]

def _check_dataset(dataset: Any) -> None:
    import datasets

    if isinstance(dataset, datasets.IterableDataset):
        raise TypeError(
            "HuggingFaceDataSource takes a map-style datasets.Dataset, got a datasets.IterableDataset "
            "(streaming). Use grain_core.experimental.HuggingFaceIterDataset(dataset) for it."
        )
    if isinstance(dataset, datasets.DatasetDict):
        raise TypeError(
            "HuggingFaceDataSource takes one split (a datasets.Dataset), got a DatasetDict with "
            f"splits {sorted(dataset)}; pass e.g. dataset['train']."
        )
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(
            f"HuggingFaceDataSource takes a datasets.Dataset, got {type(dataset).__name__}."
        )


class HuggingFaceDataSource(grain.sources.RandomAccessDataSource[Any]):
    """The rows of a Hugging Face ``datasets.Dataset`` (in memory, ``load_from_disk``,
    ``load_dataset`` of local or downloaded files), read in bulk through Arrow.

    Rows: with no format set on the dataset, each row is a dict ``{column: numpy value}`` exactly as
    ``dataset.with_format("numpy")[i]`` gives it (numbers as numpy scalars, strings as
    ``numpy.str_``, lists of numbers as arrays). With a format set (``with_format("numpy" |
    "torch" | "jax" | "arrow" | ...)``, ``set_transform``), each row is exactly ``dataset[i]``.
    ``with_format(columns=[...])`` limits the columns either way.

    Contract: ``len(source) == len(dataset)``; ``source[i]`` is row ``i`` of the dataset as it is
    (after ``select`` / ``shuffle`` / ``filter``: the indices mapping is applied); ``__getitems__``
    reads many rows with one Arrow ``take`` and converts them column by column (numeric, string
    and uniformly nested numeric list columns); a dataset with other columns (images, ragged nested
    lists, nulls) or another format is read row by row through ``dataset[i]``. Out-of-range indices raise
    ``IndexError`` naming the length; negative ones count from the end. Thread-safe. Pickled as
    the dataset (``datasets`` pickles a file-backed dataset by its paths, so a worker maps the same
    files), without the per-process caches. ``repr`` names the dataset's fingerprint, length,
    columns and format, identical in every process, so a checkpoint restores only into the same
    data.

    Raises:
      TypeError: not a ``datasets.Dataset`` (an ``IterableDataset`` or a ``DatasetDict`` say what to
        use instead).
    """

    def __init__(self, dataset: Any):
        _check_dataset(dataset)
        self._dataset = dataset
        self._len = len(dataset)
        fmt = dataset.format
        self._format_type = fmt.get("type")
        columns = fmt.get("columns")
        self._columns = list(dataset.column_names if columns is None else columns)
        self._output_all = bool(fmt.get("output_all_columns"))
        self._fingerprint = str(getattr(dataset, "_fingerprint", None))
        features = dataset.features
        # The fast path applies where our rows are exactly the numpy format's rows.
        self._fast = (
            self._format_type in (None, "numpy")
            and not self._output_all
            and not fmt.get("format_kwargs")
            and all(_rows.fast_feature(features[c]) for c in self._columns if c in features)
        )
        self._init_runtime()

    def _init_runtime(self) -> None:
        # The pyarrow.Table of the format's columns and the dataset's indices mapping (or None),
        # per process, lazily.
        self._arrow_cache: tuple[Any, np.ndarray | None] | None = None
        self._numpy: Any = None  # the dataset with the numpy format, for the slow path
        # The table's record batches (zero copy) and the first row of each (and the total).
        self._chunks: tuple[list[Any], np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for k in ("_arrow_cache", "_numpy", "_chunks"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def dataset(self) -> Any:
        """The wrapped ``datasets.Dataset``."""
        return self._dataset

    @property
    def column_names(self) -> list[str]:
        """The columns each row holds (the format's columns)."""
        return list(self._columns)

    @property
    def element_spec(self) -> Any:
        """``{column: ShapeDtypeStruct}`` of a row, from the dataset's features (no row read; see
        :mod:`grain_plugin_hf.specs`). ``MapDataset.source(src)`` answers ``get_element_spec``
        with it.

        Raises:
          NotImplementedError: a column or format without a spec (images, another format, ...).
        """
        from grain_plugin_hf.specs import features_spec

        if self._output_all or self._dataset.format.get("format_kwargs"):
            raise NotImplementedError(
                "HuggingFaceDataSource.element_spec: a format with output_all_columns or format "
                "options has no spec from the features."
            )
        return features_spec(self._dataset.features, self._columns, self._format_type)

    def __len__(self) -> int:
        return self._len

    def _formatted(self) -> Any:
        """The dataset whose ``dataset[i]`` are this source's rows (slow path)."""
        if self._format_type is not None:
            return self._dataset
        if self._numpy is None:
            self._numpy = self._dataset.with_format("numpy", columns=self._columns)
        return self._numpy

    def _arrow(self) -> tuple[Any, np.ndarray | None]:
        arrow = self._arrow_cache
        if arrow is None:  # built once per process; threads racing here build equal values
            indices = getattr(self._dataset, "_indices", None)  # select/shuffle/filter views
            mapping = None if indices is None else indices.column(0).to_numpy().astype(np.int64)
            arrow = self._arrow_cache = (self._dataset.data.table.select(self._columns), mapping)
        return arrow

    def _take(self, table: Any, rows_at: np.ndarray, pa: Any) -> Any:
        """``table.take(rows_at)`` chunk by chunk: Arrow's take on a many-chunk (memory-mapped)
        table concatenates whole chunks first, which costs the column's size per call."""
        chunks = self._chunks
        if chunks is None:  # built once per process; threads racing here build equal values
            batches = table.to_batches()
            sizes = np.fromiter((b.num_rows for b in batches), np.int64, len(batches))
            chunks = self._chunks = (batches, np.concatenate([[0], np.cumsum(sizes)]))
        batches, starts = chunks
        if len(batches) == 1:
            return pa.Table.from_batches([batches[0].take(pa.array(rows_at))])
        which = np.searchsorted(starts, rows_at, side="right") - 1
        order = np.argsort(which, kind="stable")
        sorted_which = which[order]
        parts = []
        bounds = np.flatnonzero(np.diff(sorted_which)) + 1
        for group in np.split(order, bounds):
            c = int(which[group[0]])
            parts.append(batches[c].take(pa.array(rows_at[group] - starts[c])))
        gathered = pa.Table.from_batches(parts).combine_chunks()
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return gathered.take(pa.array(inverse))

    def __getitem__(self, record_key: SupportsIndex) -> Any:
        """Row ``record_key`` (negative indices count from the end)."""
        i = operator.index(record_key)
        j = i + self._len if i < 0 else i
        if not 0 <= j < self._len:
            raise IndexError(
                f"index {i} out of range for HuggingFaceDataSource of length {self._len}."
            )
        return self.__getitems__([j])[0]

    def __getitems__(self, record_keys: Sequence[int]) -> list[Any]:
        """The rows at ``record_keys`` in the order asked: one Arrow ``take`` for all of them."""
        keys = check_indices(record_keys, self._len, "HuggingFaceDataSource")
        if len(keys) == 0:
            return []
        if self._fast:
            import pyarrow as pa

            table, mapping = self._arrow()
            rows_at = keys if mapping is None else mapping[keys]
            rows = _rows.rows_from_table(self._take(table, rows_at, pa), self._columns)
            if rows is not None:
                return rows
        # Row by row through datasets: its batch formatting casts some values differently from
        # its row formatting (a float64 column gives float32 in batches), and rows are the contract.
        formatted = self._formatted()
        return [formatted[k] for k in keys.tolist()]

    def __repr__(self) -> str:
        return (
            f"HuggingFaceDataSource(fingerprint={self._fingerprint!r}, len={self._len}, "
            f"columns={self._columns!r}, format={self._format_type!r})"
        )
