"""Hook implementations registering the ArrayRecord source."""

from grain_core.author import hookimpl
from grain_plugin_arrayrecord.source import ArrayRecordDataSource, FileInstruction


@hookimpl
def register_sources(register):
    register(ArrayRecordDataSource)
    register(FileInstruction)
