"""``PackAndBatchOperation`` (Grain's ``grain.experimental.PackAndBatchOperation``): the legacy
first-fit packing operation for ``DataLoader`` pipelines.

A legacy :class:`~grain_core.operations.Operation`: ``op(records)`` takes an iterator of
:class:`~grain_core.records.Record` whose data are PyTrees of arrays (sequence length first, ragged
across records) and returns records whose data is ``(packed, segmentations, positions)``:

* ``packed`` has the input's structure with leaves of shape ``(batch_size, length, ...)`` where
  ``length`` is the leaf's entry in ``length_struct``; unused cells are zero;
* ``segmentations`` (int32, ``(batch_size, length)`` per leaf) numbers the records packed in a row
  from 1 (0 = padding); ``positions`` is each token's position within its record.

Each record goes into the first row where every feature fits (and, with ``max_sequences_per_bin``,
the row holds fewer records than that); when no row fits, the batch is emitted and a new one started
with the record. The last, partial batch is emitted at the end. A record longer than
``length_struct`` raises ``ValueError``. The output record's metadata is that of the last record
added to the batch, without ``record_key``. New code should use ``FirstFitPackIterDataset``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from grain_core import tree
from grain_core.records import Record, RecordMetadata

__all__ = ["PackAndBatchOperation"]

_log = logging.getLogger(__name__)


def _leaves(t: Any) -> list[Any]:
    return [leaf for _, leaf in tree.flatten_with_paths(t)]


class _Batch:
    """One batch being filled: per leaf a ``(B, T, ...)`` buffer, segment ids and positions."""

    def __init__(self, first: Any, batch_size: int, length_struct: Any, max_per_row: int | None):
        self.batch_size = batch_size
        self.max_per_row = max_per_row
        self.lengths = [int(n) for n in _leaves(length_struct)]
        self.data = tree.map_structure(
            lambda n, x: np.zeros((batch_size, n, *np.shape(x)[1:]), dtype=np.asarray(x).dtype),
            length_struct,
            first,
        )
        self.segmentations = tree.map_structure(
            lambda n: np.zeros((batch_size, n), dtype=np.int32), length_struct
        )
        self.positions = tree.map_structure(
            lambda n: np.zeros((batch_size, n), dtype=np.int32), length_struct
        )
        self.free = [np.zeros(batch_size, dtype=np.int64) for _ in self.lengths]
        self.count = [0] * batch_size
        self.metadata: RecordMetadata | None = None

    def try_add(self, record: Record) -> bool:
        values = _leaves(record.data)
        if len(values) != len(self.lengths):
            raise ValueError(
                f"PackAndBatchOperation: the record has {len(values)} features but length_struct "
                f"has {len(self.lengths)}; give length_struct the structure of the records."
            )
        sizes = [len(v) for v in values]
        if any(s > n for s, n in zip(sizes, self.lengths)):
            raise ValueError("Inputs to PackAndBatchOperation must be truncated to max length.")
        for row in range(self.batch_size):
            if self.max_per_row is not None and self.count[row] >= self.max_per_row:
                continue
            if all(s + f[row] <= n for s, f, n in zip(sizes, self.free, self.lengths)):
                self._put(values, sizes, row)
                self.metadata = record.metadata.remove_record_key()
                return True
        return False

    def _put(self, values: list[Any], sizes: list[int], row: int) -> None:
        segment = self.count[row] + 1
        for v, s, buf, seg, pos, free in zip(
            values,
            sizes,
            _leaves(self.data),
            _leaves(self.segmentations),
            _leaves(self.positions),
            self.free,
        ):
            start = int(free[row])
            buf[row, start : start + s] = v
            seg[row, start : start + s] = segment
            pos[row, start : start + s] = np.arange(s)
            free[row] = start + s
        self.count[row] += 1

    def record(self) -> Record:
        assert self.metadata is not None  # a batch is emitted only after a record was added
        return Record(self.metadata, (self.data, self.segmentations, self.positions))


@dataclasses.dataclass
class PackAndBatchOperation:
    """Packs records first-fit into batches of ``batch_size`` rows (see the module docstring).

    Attributes:
      length_struct: the records' structure with an int per leaf: the packed length of that feature.
      batch_size: rows per batch.
      max_sequences_per_bin: at most this many records in a row (None: no limit).
    """

    length_struct: Any
    batch_size: int
    max_sequences_per_bin: int | None = None
    _cur_batch: Any = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or self.batch_size < 1
        ):
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}.")
        _log.error(
            "PackAndBatchOperation is deprecated. Please use FirstFitPackIterDataset instead."
        )

    def __call__(self, input_iterator: Iterator[Record]) -> Iterator[Record]:
        batch: _Batch | None = None
        for record in input_iterator:
            if batch is None:
                batch = _Batch(
                    record.data, self.batch_size, self.length_struct, self.max_sequences_per_bin
                )
            if not batch.try_add(record):
                yield batch.record()
                batch = _Batch(
                    record.data, self.batch_size, self.length_struct, self.max_sequences_per_bin
                )
                batch.try_add(record)
            self._cur_batch = batch
        if batch is not None:
            yield batch.record()
