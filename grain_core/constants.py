"""Grain's metadata constants (``grain.constants``): the keys Grain's legacy pipelines use for an
element's metadata features. Same names and values as Grain 0.2.x."""

from __future__ import annotations

__all__ = ["DATASET_INDEX", "EPOCH", "INDEX", "META_FEATURES", "RECORD", "RECORD_KEY", "SEED"]

#: Position of the element in the sampler's stream.
INDEX = "_index"
#: Key of the record read from the data source.
RECORD_KEY = "_record_key"
#: Which of several mixed datasets the element came from.
DATASET_INDEX = "_dataset_index"
#: The epoch the element belongs to.
EPOCH = "_epoch"
#: The per-element seed.
SEED = "_seed"
#: The raw record.
RECORD = "_record"
#: All metadata feature keys.
META_FEATURES = frozenset([INDEX, RECORD_KEY, DATASET_INDEX, EPOCH, SEED, RECORD])
