"""The conformance kit: checks every data source and transformation should pass.

Plugin authors call these from their own tests (grain_core's built-in plugins do)::

    from grain_core import testing

    def test_my_source_conforms(tmp_path):
        testing.check_source(MySource(...))

    def test_my_transform_checkpoints():
        testing.assert_equal_output_after_checkpoint(make_dataset())

Each check raises ``AssertionError`` with a message saying which property failed.
"""

from grain_core.testing.checkpoint import assert_equal_output_after_checkpoint, check_deterministic
from grain_core.testing.plugins import check_plugin_listed, open_file_count
from grain_core.testing.sources import check_source

__all__ = [
    "assert_equal_output_after_checkpoint",
    "check_deterministic",
    "check_plugin_listed",
    "check_source",
    "open_file_count",
]
