"""grain_core plugin providing ``ArrayRecordDataSource`` and ``FileInstruction``."""

from grain_plugin_arrayrecord.source import ArrayRecordDataSource, FileInstruction

__all__ = ["ArrayRecordDataSource", "FileInstruction"]
