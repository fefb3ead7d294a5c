"""grain_core plugin providing ``ArrayRecordDataSource`` and ``FileInstruction``."""

from grain_plugin_arrayrecord.source import ArrayRecordDataSource, FileInstruction, RecordReadError

__all__ = ["ArrayRecordDataSource", "FileInstruction", "RecordReadError"]
