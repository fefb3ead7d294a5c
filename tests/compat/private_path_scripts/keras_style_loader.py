"""Keras's Grain adapter, in the shape it is written: it imports ``SharedMemoryArrayMetadata`` from
Grain's private shared-memory module and rebuilds a ``DataLoader`` from the loader's private
attributes (``_data_source``, ``_sampler``, ``_operations``, ``_multiprocessing_options``,
``_shard_options``, ``_read_options``) with one more operation appended. Our own code, the same
calls; it also wraps datasets in Grain's ``MapMapDataset`` / ``MapIterDataset`` directly. Run
with google grain (the recorder) or through ``python -m grain_core.compat run``; prints one JSON
object.
"""

import json

import grain
import numpy as np
from grain._src.python.dataset.transformations import map as map_ds
from grain._src.python.ipc.shared_memory_array import SharedMemoryArrayMetadata


class AddOne(grain.transforms.Map):
    def map(self, x):
        return x + 1


class ToNumpy(grain.transforms.Map):
    def map(self, x):
        if isinstance(x, (np.ndarray, SharedMemoryArrayMetadata)):
            return x
        return np.asarray(x)


def rebuild(loader, extra):
    mp_options = loader._multiprocessing_options
    return grain.DataLoader(
        data_source=loader._data_source,
        sampler=loader._sampler,
        operations=list(loader._operations) + extra,
        worker_count=mp_options.num_workers,
        worker_buffer_size=mp_options.per_worker_buffer_size,
        shard_options=loader._shard_options,
        read_options=loader._read_options,
        enable_profiling=mp_options.enable_profiling,
    )


def main() -> dict:
    sampler = grain.samplers.IndexSampler(
        num_records=10,
        shard_options=grain.sharding.ShardOptions(shard_index=1, shard_count=2),
        shuffle=True,
        num_epochs=1,
        seed=4,
    )
    loader = grain.DataLoader(
        data_source=grain.sources.RangeDataSource(0, 10, 1),
        sampler=sampler,
        operations=[AddOne()],
        worker_count=0,
    )
    rebuilt = rebuild(loader, [ToNumpy(), grain.transforms.Batch(batch_size=2)])
    batch_ops = [op for op in rebuilt._operations if isinstance(op, grain.transforms.Batch)]
    # The adapter wraps datasets in Grain's map stages directly.
    mapped = map_ds.MapMapDataset(grain.MapDataset.range(5).shuffle(seed=2), AddOne())
    iter_mapped = map_ds.MapIterDataset(mapped.to_iter_dataset().batch(2), ToNumpy())
    return {
        "batch_op": [batch_ops[-1].batch_size, batch_ops[-1].drop_remainder],
        "map_map": [int(mapped[i]) for i in range(len(mapped))],
        "map_iter": [b.tolist() for b in iter_mapped],
        "original": [int(x) for x in loader],
        "rebuilt": [b.tolist() for b in rebuilt],
        "options": [
            loader._multiprocessing_options.num_workers,
            loader._shard_options.shard_index,
            loader._shard_options.shard_count,
            len(loader._operations),
        ],
    }


if __name__ == "__main__":
    print(json.dumps(main(), sort_keys=True))
