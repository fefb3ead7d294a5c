"""One JAX process of test_ray_jax_processes.py, run in its own interpreter.

``python jax_process_driver.py PROCESS_ID COORDINATOR RAY_ADDRESS``: joins the 2-process JAX job
at ``COORDINATOR`` (CPU), connects to the Ray cluster at ``RAY_ADDRESS``, builds the shared pipeline
sharded by ``ShardByJaxProcess`` with its own pool of 2 Ray actors, reads part of its shard, saves
the state, reads the rest, restores the state into a new iterator (a new actor pool) and reads the
rest again. Prints one JSON line with what it saw.
"""

from __future__ import annotations

import json
import sys

import jax
import ray
from grain_plugin_ray import ACTOR_NAMESPACE, RayRuntime

import grain_core as grain

N = 26
HEAD = 5


def pipeline() -> grain.IterDataset:
    shard = grain.ShardByJaxProcess()
    return (
        grain.MapDataset.range(N)
        .seed(11)
        .shuffle()[shard.shard_index :: shard.shard_count]
        .to_iter_dataset()
        .random_map(lambda x, r: {"x": int(x), "r": int(r.integers(1 << 30))})
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2), runtime=RayRuntime(num_cpus=0))
    )


def own_actors() -> set[str]:
    named = ray.util.list_named_actors(all_namespaces=True)
    return {a["name"] for a in named if a["namespace"] == ACTOR_NAMESPACE}


def main(process_id: int, coordinator: str, ray_address: str) -> None:
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=2,
        process_id=process_id,
        initialization_timeout=240,
    )
    ray.init(address=ray_address, log_to_driver=False)
    try:
        with iter(pipeline()) as it:
            head = [next(it) for _ in range(HEAD)]
            state = it.get_state()
            pool = set(it.pool.actor_names)
            rest = list(it)
        with iter(pipeline()) as again:
            again.set_state(state)
            restored = list(again)
        print(
            json.dumps(
                {
                    "process_index": jax.process_index(),
                    "process_count": jax.process_count(),
                    "elements": head + rest,
                    "restored": restored,
                    "pool": sorted(pool),
                }
            ),
            flush=True,
        )
    finally:
        ray.shutdown()
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
