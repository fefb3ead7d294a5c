"""grain_core plugin providing ``TFRecordIterDataset`` (a TFRecord reader without TensorFlow) and
``TFRecordWriter`` / ``write_tfrecords``."""

from grain_plugin_tfrecord.dataset import TFRecordIterDataset
from grain_plugin_tfrecord.format import (
    TFRecordCorruptionError,
    TFRecordWriter,
    masked_crc32c,
    read_records,
    write_tfrecords,
)

__all__ = [
    "TFRecordCorruptionError",
    "TFRecordIterDataset",
    "TFRecordWriter",
    "masked_crc32c",
    "read_records",
    "write_tfrecords",
]
