"""Grain's "Advanced Dataset usage" tutorial (docs/tutorials/dataset_advanced_tutorial), as a script.

Same calls in the same order: a seeded, shuffled ``to_iter_dataset`` checkpointed with Orbax
(``grain.checkpoint.CheckpointSave`` / ``CheckpointRestore``); ``MapDataset.mix`` with weights;
``IterDataset.mix`` of filtered datasets; mixing repeated datasets (infinite length); per-dataset
``seed(...).shuffle().repeat()`` before mixing; the hierarchical shuffle (Parquet files ->
``InterleaveIterDataset`` -> ``WindowShuffleIterDataset``); ``ThreadPrefetchIterDataset`` with
``jax.device_put``; ``grain.experimental.device_put`` with a ``NamedSharding``; ``ReadOptions``;
``pick_performance_config``; ``mp_prefetch`` with worker processes.

Stand-ins: the tutorial downloads TFDS ``mnist`` and ``pneumonia_mnist``; here two tiny TFDS
datasets with ``image`` / ``label`` features (plus an ``id``) are built locally in ArrayRecord
format; the tutorial's unnamed Parquet ``filenames`` are written here with pyarrow.
"""

import os
import sys

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow_datasets as tfds
from tutorial_io import done, show

DATA_DIR = os.path.abspath("tfds_data")


def build_datasets():
    # Defined here, not at module level: worker processes re-import this script and TFDS registers
    # a builder class once per name.
    class _Digits(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version("1.0.0")
        SIZE = 0
        TAG = 0

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {
                        "image": tfds.features.Tensor(shape=(4, 4, 1), dtype=np.uint8),
                        "label": tfds.features.ClassLabel(num_classes=10),
                        "id": np.int64,
                    }
                ),
            )

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            for i in range(self.SIZE):
                yield i, {"image": np.full((4, 4, 1), self.TAG, np.uint8), "label": i % 10, "id": self.TAG * 1000 + i}

    class TutorialMnist(_Digits):
        SIZE, TAG = 40, 1

    class TutorialPneumoniaMnist(_Digits):
        SIZE, TAG = 30, 2

    for cls in (TutorialMnist, TutorialPneumoniaMnist):
        cls(data_dir=DATA_DIR, file_format="array_record").download_and_prepare()


def ids(iterable, n):
    it = iter(iterable)
    return [int(next(it)["id"]) for _ in range(n)]


def main():
    build_datasets()
    mnist = tfds.data_source("tutorial_mnist", split="train", data_dir=DATA_DIR)
    pneumonia_mnist = tfds.data_source("tutorial_pneumonia_mnist", split="train", data_dir=DATA_DIR)

    # Checkpointing
    ds = grain.MapDataset.source(mnist).seed(seed=45).shuffle().to_iter_dataset()
    num_steps = 4
    ds_iter = iter(ds)
    first = []
    for i in range(num_steps):
        x = next(ds_iter)
        print(i, x["label"])
        first.append([i, int(x["id"]), int(x["label"])])
    show("checkpoint_first_steps", first, echo=False)
    mngr = ocp.CheckpointManager(os.path.abspath("orbax"))
    mngr.save(step=num_steps, args=grain.checkpoint.CheckpointSave(ds_iter), force=True)
    mngr.wait_until_finished()
    show("checkpoint_next_steps", ids(ds_iter, num_steps))
    mngr.restore(num_steps, args=grain.checkpoint.CheckpointRestore(ds_iter))
    show("checkpoint_after_restore", ids(ds_iter, num_steps))
    mngr.close()

    # Mixing
    ds1 = grain.MapDataset.source(pneumonia_mnist).map(lambda features: features["id"])
    ds2 = grain.MapDataset.source(mnist).map(lambda features: features["id"])
    ds = grain.MapDataset.mix([ds1, ds2], weights=[0.7, 0.3])
    show("map_mix_len", f"Mixed dataset length = {len(ds)}")
    show("map_mix_all", [int(x) for x in ds], echo=False)

    ds1 = grain.MapDataset.source(pneumonia_mnist).filter(lambda f: int(f["label"]) == 1).to_iter_dataset()
    ds2 = grain.MapDataset.source(mnist).filter(lambda f: int(f["label"]) > 4).to_iter_dataset()
    ds = grain.IterDataset.mix([ds1, ds2], weights=[0.7, 0.3])
    show("iter_mix_shape", np.shape(next(iter(ds.map(lambda features: features["image"])))))
    show("iter_mix_ids", [int(f["id"]) for f in ds], echo=False)

    ds1 = grain.MapDataset.source(pneumonia_mnist).repeat()
    ds2 = grain.MapDataset.source(mnist).repeat()
    ds = grain.MapDataset.mix([ds1, ds2], weights=[1, 2])
    show("repeat_mix_lens", [len(ds1) == sys.maxsize, len(ds2) == sys.maxsize, len(ds) == sys.maxsize])
    show("repeat_mix_ids", ids(ds, 90), echo=False)

    ds1 = grain.MapDataset.source(pneumonia_mnist).seed(42).shuffle().repeat()
    ds2 = grain.MapDataset.source(mnist).seed(43).shuffle().repeat()
    ds = grain.MapDataset.mix([ds1, ds2], weights=[1, 2])
    show("shuffled_repeat_mix_ids", ids(ds, 90), echo=False)

    # Hierarchical shuffle over Parquet files
    filenames = []
    for f in range(3):
        name = os.path.abspath(f"part-{f}.parquet")
        pq.write_table(pa.table({"id": list(range(f * 100, f * 100 + 8))}), name)
        filenames.append(name)
    dataset = grain.MapDataset.source(filenames)
    dataset = dataset.map(grain.experimental.ParquetIterDataset)
    dataset = grain.experimental.WindowShuffleIterDataset(
        grain.experimental.InterleaveIterDataset(dataset, cycle_length=len(filenames)), window_size=10, seed=42
    )
    iter_ds = iter(dataset)
    show("hierarchical_first_5", [next(iter_ds) for _ in range(5)])
    show("hierarchical_rest", [row["id"] for row in iter_ds], echo=False)

    # Prefetching
    cpu_buffer_size = 3
    ds = grain.MapDataset.source(mnist).to_iter_dataset()
    ds.map(lambda x: x)
    ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=cpu_buffer_size)
    ds = ds.map(jax.device_put)
    first = next(iter(ds))
    show("device_put_first", [isinstance(first["image"], jax.Array), int(first["id"])])

    tpu_buffer_size = 2
    # Batched (unlike the tutorial): a "data"-sharded leaf needs rank >= 1, and labels are scalars.
    ds = grain.MapDataset.source(mnist).to_iter_dataset().batch(4)
    devices = jax.devices()[:1]
    mesh = jax.sharding.Mesh(np.array(devices), axis_names=("data",))
    p = jax.sharding.PartitionSpec("data")
    sharding = jax.sharding.NamedSharding(mesh, p)
    ds = grain.experimental.device_put(
        ds=ds, device=sharding, cpu_buffer_size=cpu_buffer_size, device_buffer_size=tpu_buffer_size
    )
    show("sharded_device_put_ids", [np.asarray(x["id"]).tolist() for x in ds][:3])

    read_options = grain.ReadOptions(num_threads=32, prefetch_buffer_size=400)
    ds = grain.MapDataset.source(mnist).to_iter_dataset(read_options=read_options)
    show("read_options_ids", ids(ds, 40), echo=False)

    ds = grain.MapDataset.source(mnist)
    performance_config = grain.experimental.pick_performance_config(
        ds=ds, ram_budget_mb=1024, max_workers=None, max_buffer_size=None
    )
    ds = ds.to_iter_dataset(read_options=performance_config.read_options)
    show("performance_config_ids", ids(ds, 40), echo=False)

    ds = grain.MapDataset.source(mnist).to_iter_dataset()
    prefetch_lazy_iter_ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=3, per_worker_buffer_size=10))
    show("mp_prefetch_ids", [int(f["id"]) for f in prefetch_lazy_iter_ds], echo=False)
    done()


# Worker processes re-import this script (spawn), so the tutorial runs only in the main process.
if __name__ == "__main__":
    main()
