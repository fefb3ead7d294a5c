"""Shared fixtures: a small TFDS dataset built locally in array_record format (no download, no
TensorFlow), standing in for MNIST."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow_datasets as tfds

NUM_TRAIN = 60
NUM_TEST = 12


class GrainTinyMnist(tfds.core.GeneratorBasedBuilder):
    """28x28 uint8 "digits" whose pixels all equal the example id, label = id % 10."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(shape=(28, 28, 1), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=10),
                    "id": np.int64,
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {
            "train": self._generate_examples(NUM_TRAIN),
            "test": self._generate_examples(NUM_TEST),
        }

    def _generate_examples(self, n):
        for i in range(n):
            image = np.full((28, 28, 1), i, dtype=np.uint8)
            yield i, {"image": image, "label": i % 10, "id": i}


@pytest.fixture(scope="session")
def tfds_data_dir(tmp_path_factory) -> str:
    """A data_dir holding ``grain_tiny_mnist`` prepared as array_record."""
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    builder = GrainTinyMnist(data_dir=data_dir, file_format="array_record")
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )
    return data_dir
