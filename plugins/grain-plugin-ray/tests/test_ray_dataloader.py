"""``DataLoader(..., runtime=RayRuntime(...))``: the loader's workers run as Ray actors with the
process runtime's elements and state; a loader checkpoint moves between the two."""

from __future__ import annotations

import numpy as np
import pytest
import ray
from grain_plugin_ray import ACTOR_NAMESPACE, RayRuntime

import grain_core as grain

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]


def loader(runtime=None) -> grain.DataLoader:
    return grain.DataLoader(
        data_source=[np.full(2, i) for i in range(30)],
        sampler=grain.IndexSampler(30, shuffle=True, seed=7, num_epochs=1),
        operations=[grain.transforms.Batch(batch_size=4)],
        worker_count=2,
        runtime=runtime,
    )


def live_actors() -> set[str]:
    named = ray.util.list_named_actors(all_namespaces=True)
    return {a["name"] for a in named if a["namespace"] == ACTOR_NAMESPACE}


def ints(batches) -> list:
    return [b.tolist() for b in batches]


def test_dataloader_on_ray_matches_processes_and_checkpoints_both_ways():
    with iter(loader()) as it:
        expected = ints(it)
    before = live_actors()
    with iter(loader(RayRuntime(num_cpus=0))) as it:
        head = ints(next(it) for _ in range(3))
        assert len(live_actors() - before) == 2  # the workers are Ray actors
        state = it.get_state()
        rest_on_ray = ints(it)
    assert head + rest_on_ray == expected
    with iter(loader()) as it:  # Ray -> processes
        it.set_state(state)
        assert ints(it) == rest_on_ray
    with iter(loader()) as it:  # processes -> Ray, by name
        ints(next(it) for _ in range(5))
        state = it.get_state()
    with iter(loader("ray")) as it:
        it.set_state(state)
        assert ints(it) == expected[5:]
