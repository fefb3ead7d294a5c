"""Grain's "DataLoader guide" (docs/tutorials/data_loader_tutorial), as a script.

Same calls in the same order: ``IndexSampler`` records, a ``tfds.data_source`` read by a
``DataLoader`` with a ``MapTransform``, Orbax checkpointing with ``PyGrainCheckpointSave`` /
``PyGrainCheckpointRestore`` (grain.python's names in 0.2.18), ``InMemoryDataSource`` with worker processes and per-worker
``ReadOptions``.

Stand-ins: the tutorial downloads ``imagenet_a``; here a tiny TFDS dataset with the same features
(``image``, ``file_name``, ``label``) is built locally in ArrayRecord format. The tutorial's
``cv2.resize`` (not installed here) becomes a nearest-neighbour resize in numpy.
"""

import os

import grain.python as grain
import numpy as np
import orbax.checkpoint as ocp
import tensorflow_datasets as tfds
from tutorial_io import done, show

DATA_DIR = os.path.abspath("tfds_data")


class ResizeAndCrop(grain.MapTransform):
    def map(self, element):
        image = element["image"]
        image = image.repeat(2, axis=0).repeat(2, axis=1)  # 8x8 -> 16x16
        image = image[:14, :14]
        element["image"] = image
        return element


def main():
    # Defined here, not at module level: worker processes re-import this script and TFDS
    # registers a builder class once per name.
    class TutorialImagenetA(tfds.core.GeneratorBasedBuilder):
        """12 small RGB images; pixel values encode the example id."""

        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                features=tfds.features.FeaturesDict(
                    {
                        "image": tfds.features.Tensor(shape=(8, 8, 3), dtype=np.uint8),
                        "file_name": tfds.features.Text(),
                        "label": tfds.features.ClassLabel(num_classes=5),
                    }
                ),
            )

        def _split_generators(self, dl_manager):
            return {"test": self._generate_examples()}

        def _generate_examples(self):
            for i in range(12):
                image = np.full((8, 8, 3), 10 * i, dtype=np.uint8)
                yield i, {"image": image, "file_name": f"img_{i:02d}.jpg", "label": i % 5}

    TutorialImagenetA(data_dir=DATA_DIR, file_format="array_record").download_and_prepare()
    # Sampler
    index_sampler_example = grain.IndexSampler(
        num_records=5,
        num_epochs=2,
        shard_options=grain.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        shuffle=True,
        seed=0,
    )
    sampled = []
    for record_metadata in index_sampler_example:
        print(record_metadata)
        sampled.append([record_metadata.index, record_metadata.record_key])
    show("sampler_index_and_record_key", sampled, echo=False)

    index_sampler = grain.IndexSampler(
        num_records=5,
        num_epochs=2,
        shard_options=grain.ShardOptions(shard_index=0, shard_count=1, drop_remainder=True),
        shuffle=True,
        seed=0,
    )

    # TFDS data source
    source = tfds.data_source("tutorial_imagenet_a", split="test", data_dir=DATA_DIR)
    show("num_records", f"# records: {len(source)}")
    show("first_record", source[0])


    transformations = [ResizeAndCrop()]

    data_loader = grain.DataLoader(
        data_source=source,
        operations=transformations,
        sampler=index_sampler,
        worker_count=0,
    )
    show(
        "loaded",
        [[e["image"].shape, int(e["image"][0, 0, 0]), e["file_name"], e["label"]] for e in data_loader],
    )

    # Checkpointing with Orbax
    data_iter = iter(data_loader)
    num_steps = 5
    first = []
    for i in range(num_steps):
        x = next(data_iter)
        print(i, x["file_name"], x["label"])
        first.append([i, x["file_name"], x["label"]])
    show("steps_0_to_4", first, echo=False)

    mngr = ocp.CheckpointManager(os.path.abspath("orbax"))
    assert mngr.save(step=num_steps, args=grain.PyGrainCheckpointSave(data_iter), force=True)
    mngr.wait_until_finished()

    advanced = []
    for i in range(5, 10):
        x = next(data_iter)
        print(i, x["file_name"], x["label"])
        advanced.append([i, x["file_name"], x["label"]])
    show("steps_5_to_9", advanced, echo=False)

    mngr.restore(num_steps, args=grain.PyGrainCheckpointRestore(data_iter))
    restored = []
    for i in range(5, 10):
        x = next(data_iter)
        print(i, x["file_name"], x["label"])
        restored.append([i, x["file_name"], x["label"]])
    show("steps_5_to_9_after_restore", restored, echo=False)
    mngr.close()

    # In-memory data source
    in_memory_datasource = grain.InMemoryDataSource(range(5))
    print(in_memory_datasource)
    show("in_memory_first", f"First Record Read: {in_memory_datasource[0]}")

    data_loader = grain.DataLoader(
        data_source=in_memory_datasource,
        sampler=grain.IndexSampler(
            num_records=len(in_memory_datasource),
            num_epochs=2,
            shard_options=grain.NoSharding(),
            shuffle=True,
            seed=0,
        ),
        worker_count=5,
    )
    data_iter = iter(data_loader)
    show("in_memory_workers", [next(data_iter) for _ in range(len(in_memory_datasource) * 2)])
    in_memory_datasource.close()
    in_memory_datasource.unlink()

    # Per-worker ReadOptions
    data_loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(
            num_records=len(source),
            num_epochs=2,
            shard_options=grain.NoSharding(),
            shuffle=True,
            seed=0,
        ),
        worker_count=2,
        read_options=grain.ReadOptions(num_threads=8, prefetch_buffer_size=500),
    )
    show("read_options_file_names", [e["file_name"] for e in data_loader])
    done()


# Worker processes re-import this script (spawn), so the tutorial runs only in the main process.
if __name__ == "__main__":
    main()
