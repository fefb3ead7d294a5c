"""Driver run by test_ray_cluster.py in its own process: connects to the two-node loopback cluster
at ``sys.argv[1]``, runs a pipeline whose actors must sit on the node with the ``second_node``
resource, restores a state there, and prints one JSON line with what it saw."""

from __future__ import annotations

import json
import sys
import time

import ray
from grain_plugin_ray import ACTOR_NAMESPACE, RayRuntime

import grain_core as grain


def log(msg: str) -> None:
    print(f"driver {time.strftime('%H:%M:%S')}: {msg}", file=sys.stderr, flush=True)


def main(address: str) -> None:
    log(f"connecting to {address}")
    deadline = time.monotonic() + 240
    while True:  # the head's GCS may answer before its raylet has registered
        try:
            ray.init(address=address, log_to_driver=False)
            break
        except ConnectionError as e:
            ray.shutdown()
            if time.monotonic() > deadline:
                raise
            log(f"not yet: {e}")
            time.sleep(2)
    try:
        while not ray.cluster_resources().get("second_node") and time.monotonic() < deadline:
            time.sleep(0.5)
        log(f"cluster resources {ray.cluster_resources()}")
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        second = [i for i, r in nodes.items() if "second_node" in r]
        ds = grain.MapDataset.range(40).map(lambda x: x * 3).to_iter_dataset()
        runtime = RayRuntime(num_cpus=0, resources={"second_node": 0.1})
        options = grain.MultiprocessingOptions(num_workers=2)
        with iter(ds.mp_prefetch(options, runtime=runtime)) as it:
            head = [int(next(it)) for _ in range(9)]
            log("9 elements read")
            state = it.get_state()
            placed = [c.location(timeout=120).node_id for c in it.pool.channels]
            names = it.pool.actor_names
        with iter(ds.mp_prefetch(options, runtime=runtime)) as again:
            again.set_state(state)
            rest = [int(x) for x in again]
        log("restored run done")
        deadline = time.monotonic() + 120
        left = set(names)
        while left and time.monotonic() < deadline:
            live = ray.util.list_named_actors(all_namespaces=True)
            left = set(names) & {a["name"] for a in live if a["namespace"] == ACTOR_NAMESPACE}
            time.sleep(0.2)
        print(
            json.dumps(
                {
                    "nodes": len(nodes),
                    "second": second,
                    "driver_node": ray.get_runtime_context().get_node_id(),
                    "placed": placed,
                    "elements": head + rest,
                    "left": sorted(left),
                }
            )
        )
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
