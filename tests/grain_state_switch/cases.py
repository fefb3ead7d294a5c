"""Pipelines whose data differ between Grain 0.2.18 and grain_core's correct mode, with the states
google grain saved in them (recorded by ``record_grain.py`` into ``grain_states.json``).

Each case's ``code`` defines ``make()`` with ``grain`` bound to the top-level module under test
(google ``grain`` when recording, ``grain_core`` when testing) and ``gp`` to its ``python``
namespace. The recorder takes ``steps`` elements, saves ``get_state()`` and every element after it.
"""

from __future__ import annotations

import json
from typing import Any

CASES: dict[str, tuple[str, int]] = {
    # a shuffle of 2**16 + 1 elements: Grain repeats its first element last (and drops one)
    "shuffle_65537": ("grain.MapDataset.range(65537).shuffle(seed=7).to_iter_dataset()", 65530),
    "shuffle_65537_map_batch": (
        "grain.MapDataset.range(65537).shuffle(seed=3).map(lambda x: x * 2).batch(8192)"
        ".to_iter_dataset()",
        7,
    ),
    "shuffle_65537_iter_batch": (
        "grain.MapDataset.range(65537).shuffle(seed=5).to_iter_dataset().batch(16384)",
        3,
    ),
    # shuffle -> slice -> repeat (Grain issue 1200): later epochs let sliced-away elements in
    "slice_repeat": ("grain.MapDataset.range(10).shuffle(seed=42)[:4].repeat(3).to_iter_dataset()", 5),
    "slice_repeat_map_batch": (
        "grain.MapDataset.range(20).shuffle(seed=1)[3:15:2].repeat(2).map(lambda x: x + 100)"
        ".to_iter_dataset().batch(4)",
        1,
    ),
    "slice_repeat_mp_prefetch": (
        "grain.MapDataset.range(10).shuffle(seed=42)[:4].repeat(3).to_iter_dataset()"
        ".mp_prefetch(grain.MultiprocessingOptions(num_workers=2))",
        5,
    ),
    # WindowShuffleMapDataset's partial last window
    "window_partial": (
        "grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(10), window_size=4, "
        "seed=3).repeat(2).to_iter_dataset()",
        5,
    ),
    # a DataLoader of an uneven shard (drop_remainder=False): Grain leaves a record unread
    "dataloader_uneven_shard": (
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 10, 1), sampler=gp.IndexSampler("
        "num_records=10, shard_options=gp.ShardOptions(0, 3, drop_remainder=False), shuffle=True, "
        "num_epochs=2, seed=3), worker_count=0)",
        2,
    ),
    # the same DataLoader with two worker processes
    "dataloader_uneven_shard_workers": (
        "gp.DataLoader(data_source=gp.RangeDataSource(0, 10, 1), sampler=gp.IndexSampler("
        "num_records=10, shard_options=gp.ShardOptions(0, 3, drop_remainder=False), shuffle=True, "
        "num_epochs=2, seed=3), worker_count=2)",
        3,
    ),
}


def make(name: str, grain: Any, gp: Any) -> Any:
    """A fresh pipeline of case ``name``."""
    namespace: dict[str, Any] = {"grain": grain, "gp": gp}
    exec("def make():\n    return " + CASES[name][0] + "\n", namespace)
    return namespace["make"]()


def to_json(value: Any) -> Any:
    """Elements as JSON (arrays as lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return json.loads(json.dumps(value))


def rest(it: Any) -> list:
    """The rest of iterator ``it`` as JSON, closing it afterwards."""
    try:
        return [to_json(x) for x in it]
    finally:
        if hasattr(it, "close"):
            it.close()
