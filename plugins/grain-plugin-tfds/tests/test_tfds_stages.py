"""The conformance kit's stage checks for TfdsDataSource in a pipeline."""

import functools

from grain_plugin_tfds import TfdsDataSource

import grain_core as grain
from grain_core import testing

NAME = "grain_tiny_mnist"


def make(data_dir, split="train"):
    return grain.MapDataset.source(TfdsDataSource(NAME, split=split, data_dir=data_dir)).shuffle(
        seed=4
    )


def test_tfds_source_conforms(tfds_data_dir):
    # The fresh process cannot build the conftest's TFDS builder class by reference; the prepared
    # files are read by name there, as in any training job.
    testing.check_stage(
        functools.partial(make, tfds_data_dir),
        foreign=functools.partial(make, tfds_data_dir, "test"),
    )
