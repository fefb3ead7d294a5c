"""Hook implementations registering the TFDS source."""

from grain_core.author import hookimpl
from grain_plugin_tfds.source import TfdsDataSource


@hookimpl
def register_sources(register):
    register(TfdsDataSource)
