"""The conformance kit's stage checks for TFRecordIterDataset."""

import functools

from grain_plugin_tfrecord import TFRecordIterDataset, write_tfrecords

from grain_core import testing


def make(path):
    return TFRecordIterDataset(path)


def test_tfrecord_iter_dataset_conforms(tmp_path):
    a, b = str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")
    write_tfrecords(a, (b"record-%03d" % i for i in range(25)))
    write_tfrecords(b, (b"other-%03d" % i for i in range(30)))
    testing.check_stage(functools.partial(make, a), foreign=functools.partial(make, b))
