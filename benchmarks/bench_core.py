"""Issue 2 workloads: the core Dataset path, threaded and in-process, and an IterDataset chain."""

from __future__ import annotations

from harness import Workload


def _plus_one(x):
    return x + 1


def _map_batch(lib, read_options):
    return (
        lib.MapDataset.range(200_000)
        .shuffle(seed=0)
        .map(_plus_one)
        .batch(32)
        .to_iter_dataset(read_options)
    )


WORKLOADS = [
    Workload(
        "range(200k).shuffle.map.batch(32) to_iter default ReadOptions",
        lambda lib: _map_batch(lib, lib.ReadOptions()),
        count=len,
        target=5,
    ),
    Workload(
        "range(200k).shuffle.map.batch(32) to_iter num_threads=0",
        lambda lib: _map_batch(lib, lib.ReadOptions(num_threads=0)),
        count=len,
        target=5,
    ),
    Workload(
        "IterDataset map->filter->batch(32) over range(200k)",
        lambda lib: lib.MapDataset.range(200_000)
        .to_iter_dataset()
        .map(lambda x: x * 2)
        .filter(lambda x: x % 3 != 0)
        .batch(32),
        count=len,
        target=5,
    ),
]
