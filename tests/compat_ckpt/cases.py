"""The pipelines whose checkpoints were recorded from google grain 0.2.18 (see ``record_grain.py``).

Each case's ``code`` is Python source run with ``grain`` bound to the top-level module under test
(``grain`` when recording, ``grain_core`` when testing), ``gp`` to its legacy ``python`` namespace
and ``np`` to NumPy; it defines ``make()`` returning a fresh ``DataLoader`` or ``IterDataset``.
The recorder takes ``steps`` elements from ``iter(make())``, saves ``get_state()`` and then every
following element; the tests restore that Grain state into a fresh grain_core iterator of the same
pipeline and compare the elements that follow.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

MAX_ELEMENTS = 1000

_OPS = """
class Times10(gp.MapTransform):
    def map(self, x):
        return x * 10

class DropThirds(gp.FilterTransform):
    def filter(self, x):
        return x % 3 != 0
"""


@dataclasses.dataclass(frozen=True)
class Case:
    """One recorded pipeline: its source and how many elements were taken before saving."""

    name: str
    code: str
    steps: int


def _loader(name: str, steps: int, body: str) -> Case:
    return Case(name, _OPS + f"\ndef make():\n    return {body}\n", steps)


def _dataset(name: str, steps: int, body: str) -> Case:
    return Case(name, f"def make():\n    return {body}\n", steps)


#: Part 1: Grain ``DataLoader`` states saved with ``worker_count > 0``.
DATALOADER_WORKERS = [
    _loader(
        "shuffled_batch_2_workers",
        3,
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 20, 1), sampler=gp.IndexSampler("
        "num_records=20, shard_options=gp.NoSharding(), shuffle=True, num_epochs=1, seed=3), "
        "operations=[gp.Batch(2)], worker_count=2)",
    ),
    _loader(
        "map_batch_3_workers_2_epochs",
        5,
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 13, 1), sampler=gp.IndexSampler("
        "num_records=13, shard_options=gp.NoSharding(), shuffle=False, num_epochs=2, seed=0), "
        "operations=[Times10(), gp.Batch(3)], worker_count=3)",
    ),
    _loader(
        "sharded_unbatched_2_workers",
        5,
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 30, 1), sampler=gp.IndexSampler("
        "num_records=30, shard_options=gp.ShardOptions(shard_index=1, shard_count=2), "
        "shuffle=True, num_epochs=1, seed=7), operations=[Times10()], worker_count=2)",
    ),
    _loader(
        "filtered_2_workers",
        4,
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 25, 1), sampler=gp.IndexSampler("
        "num_records=25, shard_options=gp.NoSharding(), shuffle=False, num_epochs=1, seed=0), "
        "operations=[DropThirds()], worker_count=2)",
    ),
    _loader(
        "uneven_shares_3_workers",
        4,
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 11, 1), sampler=gp.IndexSampler("
        "num_records=11, shard_options=gp.NoSharding(), shuffle=True, num_epochs=1, seed=2), "
        "operations=[gp.Batch(2)], worker_count=3)",
    ),
    _loader(
        "first_step_2_workers",
        0,
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 9, 1), sampler=gp.IndexSampler("
        "num_records=9, shard_options=gp.NoSharding(), shuffle=False, num_epochs=1, seed=0), "
        "operations=[gp.Batch(2)], worker_count=2)",
    ),
]

#: Part 2: states of Grain's standalone ``IterDataset.mp_prefetch`` iterators.
MP_PREFETCH = [
    _dataset(
        "map_2_workers",
        3,
        "grain.MapDataset.range(10).map(lambda x: x * 10).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2))",
    ),
    _dataset(
        "shuffle_batch_3_workers",
        4,
        "grain.MapDataset.range(17).shuffle(seed=5).to_iter_dataset().batch(2)"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=3))",
    ),
    _dataset(
        "one_worker_ahead_of_the_other",
        4,
        "grain.MapDataset.range(5).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2))",
    ),
    _dataset(
        "filter_2_workers",
        5,
        "grain.MapDataset.range(20).filter(lambda x: x % 3 != 0).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2))",
    ),
    _dataset(
        "one_worker_exhausted",
        6,
        "grain.MapDataset.range(9).filter(lambda x: x < 5 or x % 2 == 0).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2))",
    ),
    _dataset(
        "mp_then_map_in_main_process",
        5,
        "grain.MapDataset.range(12).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2)).map(lambda x: x + 100)",
    ),
]

#: Part 4: ``mp_prefetch(..., sequential_slice=True)`` (element order and states).
SEQUENTIAL_SLICE = [
    _dataset(
        f"seq_shuffle_{w}_workers",
        4,
        "grain.MapDataset.range(10).shuffle(seed=1).to_iter_dataset()"
        f".mp_prefetch(grain.MultiprocessingOptions(num_workers={w}), sequential_slice=True)",
    )
    for w in (1, 2, 3, 4)
] + [
    _dataset(
        "seq_map_batch_3_workers",
        3,
        "grain.MapDataset.range(11).map(lambda x: x * 2).to_iter_dataset().batch(2)"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=3), sequential_slice=True)",
    ),
    _dataset(
        "seq_source_2_workers",
        2,
        "grain.MapDataset.source(list('abcdefg')).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2), sequential_slice=True)",
    ),
    _dataset(
        "seq_more_workers_than_elements",
        1,
        "grain.MapDataset.source(list('abc')).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=4), sequential_slice=True)",
    ),
    _dataset(
        "seq_repeat_shuffle_2_workers",
        5,
        "grain.MapDataset.range(6).shuffle(seed=2).repeat(2).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2), sequential_slice=True)",
    ),
]

ALL = {"dataloader_workers": DATALOADER_WORKERS, "mp_prefetch": MP_PREFETCH,
       "sequential_slice": SEQUENTIAL_SLICE}


def to_json(value: Any) -> Any:
    """Plain JSON value of an element (NumPy arrays and scalars, tuples, dicts)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def build(case: Case, grain: Any, gp: Any, np: Any) -> Any:
    """``make()`` of ``case`` with ``grain`` / ``gp`` bound to the modules under test."""
    namespace = {"grain": grain, "gp": gp, "np": np}
    exec(case.code, namespace)  # noqa: S102 - the cases are this file's own fixed source
    return namespace["make"]()


def take(it: Any, n: int) -> list[Any]:
    """The next ``n`` elements of ``it`` as JSON values."""
    return json.loads(json.dumps([to_json(x) for x in itertools.islice(it, n)]))


def rest(it: Any) -> list[Any]:
    """Every remaining element of ``it`` (at most ``MAX_ELEMENTS``) as JSON values."""
    return take(it, MAX_ELEMENTS)
