"""``py_debug_mode`` and ``py_dataset_visualization_output_dir`` act as in Grain 0.2.18 (issue 28 #4):
debug mode logs per-stage execution statistics periodically ("Grain Dataset Execution Summary:"),
an empty visualization directory logs the pipeline graph once per iterator ("Grain Dataset graph:"),
and a directory also gets the graph written there (Grain raises NotImplementedError: a documented
difference)."""

from __future__ import annotations

import gc
import logging
import time

import pytest

import grain_core as grain
from grain_core import debug


@pytest.fixture
def options():
    saved = {
        k: grain.config.get_or_default(k)
        for k in ("py_debug_mode", "py_dataset_visualization_output_dir")
    }
    yield grain.config
    for k, v in saved.items():
        grain.config.update(k, v)


def pipeline():
    return grain.MapDataset.range(20).shuffle(seed=1).map(lambda x: x + 1).batch(2)


def _wait_for(predicate, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_off_by_default_iterators_are_plain(options):
    it = iter(pipeline())
    assert not hasattr(it, "stats")


def test_empty_visualization_dir_logs_the_graph_once_per_iterator(options, caplog):
    options.update("py_dataset_visualization_output_dir", "")
    with caplog.at_level(logging.INFO, logger="grain_core.debug"):
        out = [x.tolist() for x in pipeline()]
    graphs = [r.getMessage() for r in caplog.records if "Grain Dataset graph:" in r.getMessage()]
    assert len(graphs) == 1 and "ShuffleMapDataset" in graphs[0] and "BatchMapDataset" in graphs[0]
    options.update("py_dataset_visualization_output_dir", None)
    assert out == [x.tolist() for x in pipeline()]


def test_visualization_dir_gets_the_graph_written(options, tmp_path, caplog):
    options.update("py_dataset_visualization_output_dir", str(tmp_path / "graphs"))
    with caplog.at_level(logging.INFO, logger="grain_core.debug"):
        it = iter(pipeline().to_iter_dataset())
        next(it)
    dots = list((tmp_path / "graphs").glob("grain_pipeline_*.dot"))
    txts = list((tmp_path / "graphs").glob("grain_pipeline_*.txt"))
    assert len(dots) == 1 and len(txts) == 1
    assert "digraph" in dots[0].read_text() and "ShuffleMapDataset" in txts[0].read_text()


def test_debug_mode_logs_execution_summaries_and_keeps_the_data(options, caplog, monkeypatch):
    monkeypatch.setattr(debug, "LOG_PERIOD_S", 3600.0)  # reports only when woken below
    plain = iter(pipeline())
    expected = [next(plain).tolist() for _ in range(10)]
    options.update("py_debug_mode", True)
    with caplog.at_level(logging.INFO, logger="grain_core.debug"):
        it = iter(pipeline())
        got = [next(it).tolist() for _ in range(4)]
        state = it.get_state()
        assert it.stats().stages[0].elements == 4
        debug.reporter.wake()
        _wait_for(
            lambda: any("Execution Summary" in r.getMessage() for r in caplog.records),
            "the execution summary log",
        )
        got += list(x.tolist() for x in it)
    assert got == expected
    again = iter(pipeline())
    again.set_state(state)
    assert [x.tolist() for x in again] == expected[4:]
    summary = next(r.getMessage() for r in caplog.records if "Execution Summary" in r.getMessage())
    assert summary.startswith("Grain Dataset Execution Summary:") and "ShuffleMapDataset" in summary
    # The reporting thread ends once no debug iterator is left.
    it.close()
    again.close()
    del it, again
    gc.collect()
    thread = debug.reporter.thread()
    debug.reporter.wake()
    if thread is not None:
        thread.join(timeout=30)
        assert not thread.is_alive()


def test_debug_mode_instruments_only_the_users_iterator(options, monkeypatch):
    monkeypatch.setattr(debug, "LOG_PERIOD_S", 3600.0)
    options.update("py_debug_mode", True)
    parts = [grain.MapDataset.range(5).to_iter_dataset() for _ in range(3)]
    it = iter(grain.IterDataset.mix(parts))
    assert hasattr(it, "stats")
    assert not any(hasattr(p, "stats") for p in it._parents)
    assert list(it) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    it.close()


def test_dataset_classes_defined_in_functions_still_pickle():
    """The kernel wraps dataset classes' ``__iter__``; cloudpickle sends such classes by value
    (as for ``__main__``), which must not drag unpicklable module state along."""
    import cloudpickle

    class Local(grain.IterDataset):
        def __iter__(self):
            return iter(self._parent)

    ds = Local(grain.MapDataset.range(3).to_iter_dataset())
    assert list(cloudpickle.loads(cloudpickle.dumps(ds))) == [0, 1, 2]


def test_debug_mode_summaries_include_the_stages_run_in_workers(options, caplog, monkeypatch):
    """Stages upstream of mp_prefetch run in worker processes; their statistics reach the logged
    summary (Grain's workers send theirs to the main process too)."""
    monkeypatch.setattr(debug, "LOG_PERIOD_S", 3600.0)
    options.update("py_debug_mode", True)
    ds = pipeline().to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    with caplog.at_level(logging.INFO, logger="grain_core.debug"):
        it = iter(ds)
        try:
            assert len(list(it)) == 10
            debug.reporter.wake()
            _wait_for(
                lambda: any("Execution Summary" in r.getMessage() for r in caplog.records),
                "the execution summary log",
            )
        finally:
            it.close()
    summary = next(r.getMessage() for r in caplog.records if "Execution Summary" in r.getMessage())
    worker_rows = [line for line in summary.splitlines() if "[2 workers]" in line]
    assert any("ShuffleMapDataset" in line for line in worker_rows), summary
