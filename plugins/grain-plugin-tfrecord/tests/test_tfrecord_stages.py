"""The conformance kit's stage checks for TFRecordIterDataset (on a file written by TensorFlow)."""

import functools
import pathlib

from grain_plugin_tfrecord import TFRecordIterDataset

from grain_core import testing

DATA = pathlib.Path(__file__).parent / "data"


def make(name):
    return TFRecordIterDataset(str(DATA / name))


def test_tfrecord_iter_dataset_conforms():
    testing.check_stage(
        functools.partial(make, "varied_sizes.tfrecord"),
        foreign=functools.partial(make, "plain.tfrecord"),
    )
