"""The conformance kit: checks every data source and transformation should pass.

Plugin authors call these from their own tests (grain_core's built-in plugins do)::

    from grain_core import testing

    def test_my_source_conforms(tmp_path):
        testing.check_source(MySource(...))

    def test_my_transform_checkpoints():
        testing.assert_equal_output_after_checkpoint(make_dataset())

    def test_my_stage_keeps_the_state_contract():
        testing.check_stage(make_dataset)  # refused states, fresh-process restore, chunks

    def test_ctrl_c_loses_nothing():
        out, interrupts = testing.drain_with_interrupts(iter(make_dataset()))  # real SIGALRM
        assert out == list(make_dataset())

Each check raises ``AssertionError`` with a message saying which property failed.
"""

from grain_core.testing.checkpoint import assert_equal_output_after_checkpoint, check_deterministic
from grain_core.testing.giveback import check_unread
from grain_core.testing.interrupts import (
    Injector,
    InterruptedRun,
    Interrupter,
    check_interrupts,
    drain_with_injected,
    drain_with_interrupts,
    run_with_interrupts,
)
from grain_core.testing.plugins import check_plugin_listed, open_file_count
from grain_core.testing.sources import check_source
from grain_core.testing.specs import check_element_spec
from grain_core.testing.stages import (
    altered_states,
    check_chunk_path,
    check_refused_state_leaves_iterator_untouched,
    check_stage,
    check_state_round_trip_in_fresh_process,
)

__all__ = [
    "Injector",
    "InterruptedRun",
    "Interrupter",
    "check_interrupts",
    "drain_with_injected",
    "drain_with_interrupts",
    "run_with_interrupts",
    "altered_states",
    "assert_equal_output_after_checkpoint",
    "check_chunk_path",
    "check_element_spec",
    "check_refused_state_leaves_iterator_untouched",
    "check_stage",
    "check_state_round_trip_in_fresh_process",
    "check_unread",
    "check_deterministic",
    "check_plugin_listed",
    "check_source",
    "open_file_count",
]
