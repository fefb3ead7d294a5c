"""Hook implementations registering ``TFRecordIterDataset``."""

from grain_core.author import hookimpl
from grain_plugin_tfrecord.dataset import TFRecordIterDataset


@hookimpl
def register_sources(register):
    register(TFRecordIterDataset, experimental=True)
