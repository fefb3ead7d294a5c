"""TFRecordIterDataset says its element spec (one record's ``bytes``: a scalar of object dtype);
Grain 0.2.18 raises NotImplementedError for it. The conformance kit checks records against it."""

import functools
import pathlib

import numpy as np
from grain_plugin_tfrecord import TFRecordIterDataset

import grain_core as grain
from grain_core import testing

DATA = pathlib.Path(__file__).parent / "data"


def make(name):
    return TFRecordIterDataset(str(DATA / name))


def test_tfrecord_element_spec():
    spec = grain.experimental.get_element_spec(make("plain.tfrecord"))
    assert spec.shape == () and np.dtype(spec.dtype) == np.dtype(object)
    assert testing.check_element_spec(
        functools.partial(make, "varied_sizes.tfrecord"), required=True
    )
