"""``self._stats`` of custom stages records as Grain's does when statistics are on, and Grain's
``get_execution_summary`` / ``pretty_format_summary`` (private paths) report a pipeline's stages
(grain_core.dataset.grain_stats, grain_core.compat.execution_summary)."""

from __future__ import annotations

import pickle

import pytest

import grain_core as grain
from grain_core.compat import private_paths
from grain_core.compat.execution_summary import get_execution_summary, pretty_format_summary
from grain_core.dataset import grain_stats


@pytest.fixture
def debug_mode():
    saved = grain.config.get_or_default("py_debug_mode")
    grain.config.update("py_debug_mode", True)
    yield
    grain.config.update("py_debug_mode", saved)


class _DoubleIterator(grain.DatasetIterator):
    def __init__(self, parent):
        super().__init__(parent)

    def __next__(self):
        value = next(self._parent)
        self._stats.record_bytes_consumed(value)
        with self._stats.record_self_time():
            doubled = [value, value]
        return self._stats.record_bytes_produced(self._stats.record_output_spec(doubled))

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)


class Double(grain.IterDataset):
    def __init__(self, parent):
        super().__init__(parent)

    def __iter__(self):
        return _DoubleIterator(self._parent.__iter__())


def _source(n=6):
    return grain.MapDataset.range(n).map(lambda x: x * 1.0).to_iter_dataset()


def test_stats_off_record_nothing():
    it = iter(Double(_source()))
    assert [x[0] for x in it] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert type(it._stats) is grain_stats.Stats
    assert it._stats.output_spec is None
    with pytest.raises(ValueError, match="STAGE_TIMING"):
        get_execution_summary(it)


def test_debug_mode_stats_record_elements_time_spec_and_bytes(debug_mode):
    it = Double(_source()).__iter__()  # the custom iterator itself (not the debug-mode wrapper)
    assert len(list(it)) == 6
    stats = it._stats
    assert isinstance(stats, grain_stats.ExecutionStats)
    assert stats.name == "_DoubleIterator" and stats.is_output
    assert stats.num_produced_elements == 6
    assert 0 < stats.min_processing_time_ns <= stats.max_processing_time_ns
    assert stats.total_processing_time_ns >= stats.max_processing_time_ns
    assert stats.output_spec is not None
    assert stats.bytes_consumed > 0 and stats.bytes_produced >= 2 * stats.bytes_consumed
    (parent,) = stats.parents
    assert isinstance(parent, grain_stats.ExecutionStats) and not parent.is_output
    assert it._stats is stats  # made once
    fresh = pickle.loads(pickle.dumps(stats))
    assert fresh.name == stats.name and fresh.num_produced_elements == 0


def test_record_self_time_counts_num_elements_and_offset(debug_mode):
    it = iter(_source())
    stats = it._stats
    with stats.record_self_time(offset_ns=10**9, num_elements=4):
        pass
    with stats.record_self_time(num_elements=0):  # counts nothing, as in Grain
        pass
    assert stats.num_produced_elements == 4
    assert stats.total_processing_time_ns >= 10**9
    assert stats.min_processing_time_ns >= 10**9 // 4
    batch = [None, {"x": 1}, {"x": 2}]
    assert stats.record_output_spec_for_batch(batch) is batch
    assert stats.output_spec is not None
    plain = grain_stats.Stats()
    assert plain.record_output_spec_for_batch(batch) is batch and plain.output_spec is None


def _find(it, cls):
    if isinstance(it, cls):
        return it
    for parent in getattr(it, "_parents", ()):
        found = _find(parent, cls)
        if found is not None:
            return found
    return None


def test_stage_timing_option_measures_every_stage_and_turns_recording_on(caplog):
    """As in Grain, STAGE_TIMING in the pipeline's options collects what py_debug_mode collects
    (without its periodic log)."""
    options = grain.experimental.DatasetOptions(
        execution_tracking_mode=grain.experimental.ExecutionTrackingMode.STAGE_TIMING
    )
    ds = grain.experimental.WithOptionsIterDataset(Double(_source(3)), options)
    it = iter(ds)
    assert hasattr(it, "stats")  # measured by grain_core.stats
    assert len(list(it)) == 3
    summary = get_execution_summary(it)
    by_name = {n.name: n for n in summary.nodes.values()}
    assert by_name["Double()"].num_produced_elements == 3
    assert any(name.startswith("MapMapDataset") for name in by_name)
    # The custom stage's own records, and the summary of its _stats tree (no measurement there).
    inner = _find(it, _DoubleIterator)
    assert isinstance(inner._stats, grain_stats.ExecutionStats)
    own = get_execution_summary(inner)
    assert own.nodes[0].name == "_DoubleIterator" and own.nodes[0].num_produced_elements == 3
    assert own.nodes[0].is_output and own.nodes[0].output_spec
    assert all(n.num_produced_elements == 0 for i, n in own.nodes.items() if i)  # kernel stages
    assert "Execution Summary" not in caplog.text


def test_summary_in_debug_mode_has_every_stage(debug_mode):
    it = iter(Double(_source()).batch(2))
    assert len(list(it)) == 3
    summary = get_execution_summary(it)
    names = [summary.nodes[i].name for i in sorted(summary.nodes)]
    assert names[0].startswith("BatchIterDataset") and names[1] == "Double()"
    assert any(n.startswith("MapMapDataset") for n in names)
    assert summary.nodes[0].num_produced_elements == 3
    assert summary.nodes[1].num_produced_elements == 6
    assert summary.nodes[1].output_spec == ""  # only the output stage's records are attached
    for node_id, node in summary.nodes.items():  # a tree: every node but 0 is one node's input
        parents = [n for n in summary.nodes.values() if node_id in n.inputs]
        assert len(parents) == (0 if node_id == 0 else 1)
        assert all(i > node_id for i in node.inputs)
    ratios = [n.wait_time_ratio for n in summary.nodes.values() if not n.is_prefetch]
    assert all(0 <= r <= 1 for r in ratios)
    text = pretty_format_summary(summary)
    for title in ("percent wait time", "total processing time", "num produced elements"):
        assert title in text
    assert len([line for line in text.splitlines() if line.startswith("| ")]) == 1 + len(names)


def test_summary_includes_stages_run_in_workers(debug_mode):
    ds = Double(_source(8).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    it = iter(ds)
    try:
        assert len(list(it)) == 8
        summary = get_execution_summary(it)
    finally:
        it.close()
    worker_stages = [n for n in summary.nodes.values() if n.name.startswith("MapMapDataset")]
    assert len(worker_stages) == 1 and worker_stages[0].num_produced_elements == 8


def test_private_paths_map_the_summary_functions():
    dataset_path = "grain._src.python.dataset.dataset"
    stats_path = "grain._src.python.dataset.stats"
    assert private_paths.resolve(dataset_path, "get_execution_summary") is get_execution_summary
    assert private_paths.resolve(stats_path, "pretty_format_summary") is pretty_format_summary


class _StatsKindIterator(grain.DatasetIterator):
    def __init__(self, parent):
        super().__init__(parent)

    def __next__(self):
        return (next(self._parent), type(self._stats).__name__, grain.config.py_debug_mode)

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)


class StatsKind(grain.IterDataset):
    def __init__(self, parent):
        super().__init__(parent)

    def __iter__(self):
        return _StatsKindIterator(self._parent.__iter__())


@pytest.mark.parametrize("debug", [False, True])
def test_workers_take_the_debug_options_so_custom_stats_record_there(debug):
    """Grain's mp_prefetch sets its debug flags in its workers: a custom stage run there records
    through self._stats exactly when py_debug_mode is on in the main process."""
    saved = grain.config.get_or_default("py_debug_mode")
    grain.config.update("py_debug_mode", debug)
    try:
        ds = StatsKind(grain.MapDataset.range(4).to_iter_dataset())
        it = iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
        try:
            got = sorted(list(it))
        finally:
            it.close()
    finally:
        grain.config.update("py_debug_mode", saved)
    kind = "ExecutionStats" if debug else "Stats"
    assert got == [(i, kind, debug) for i in range(4)]
