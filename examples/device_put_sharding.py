"""Sharding input across JAX processes and placing batches on devices with
``grain_core.experimental.device_put`` (CPU-only JAX works: one process, CPU devices).

    python examples/device_put_sharding.py [--small]
"""

from __future__ import annotations

import argparse

import numpy as np

import grain_core as grain


def main() -> None:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    n, steps = (512, 5) if args.small else (100_000, 200)

    # Each JAX process reads its own shard of the data.
    shard = grain.ShardByJaxProcess(drop_remainder=True)
    ds = grain.MapDataset.range(n)[shard.shard_index :: shard.shard_count]
    devices = np.array(jax.devices())
    batch = 8 * len(devices)
    ds = (
        ds.seed(0)
        .shuffle()
        .map(lambda i: {"x": np.full((4,), i, np.float32)})
        .batch(batch, drop_remainder=True)
        .to_iter_dataset()
    )
    sharding = NamedSharding(Mesh(devices, ("data",)), PartitionSpec("data"))
    ds = grain.experimental.device_put(ds, sharding, cpu_buffer_size=4, device_buffer_size=2)
    it = iter(ds)
    for _ in range(steps):
        b = next(it)
    assert isinstance(b["x"], jax.Array) and b["x"].shape == (batch, 4)
    print(f"process {shard.shard_index}/{shard.shard_count}: {steps} batches of {b['x'].shape} "
          f"on {len(devices)} device(s), sharding {b['x'].sharding}")
    it.close()


if __name__ == "__main__":
    main()
