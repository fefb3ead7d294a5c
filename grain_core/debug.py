"""Grain's debug options, acted on: ``py_debug_mode`` and ``py_dataset_visualization_output_dir``.

In Grain 0.2.18 these ``grain.config`` options change what a pipeline iterator does; here they do
the same with :mod:`grain_core.stats` and :mod:`grain_core.visualize`. Both are read when the user
creates an iterator (``iter(ds)`` or ``for x in ds`` on a ``MapDataset`` or ``IterDataset``; the
iterators grain_core creates inside a pipeline are left alone), so set them before that:

* ``grain_core.config.update("py_debug_mode", True)``: the iterator is
  ``grain_core.stats.iter_with_stats(ds)`` (same elements and states, plus ``stats()``), and while
  it produces elements its per-stage statistics are logged at INFO level every
  :data:`LOG_PERIOD_S` seconds (Grain's 60), starting ``Grain Dataset Execution Summary:``, as
  Grain logs its execution summary. One daemon thread logs for every such iterator and ends once
  none is left (an iterator closed or garbage-collected is dropped). Stages upstream of
  ``mp_prefetch`` run in worker processes: each worker measures its copy of them and sends its
  counters to the main process with its elements, so they are in the summary (marked
  ``[N workers]``, summed over the workers), as Grain's workers send theirs. Workers take both
  options from the main process (``grain_core.runtime.job.DEBUG_OPTIONS``, as Grain's
  ``mp_prefetch`` sets its debug flags in its workers), so a custom stage's ``self._stats`` records
  there too (:mod:`grain_core.dataset.grain_stats`); the graph is logged by the main process only.
* ``py_dataset_visualization_output_dir=""``: the pipeline graph is logged once per iterator at INFO
  level, starting ``Grain Dataset graph:`` (Grain's wording). A non-empty directory also gets the
  graph written to ``grain_pipeline_<n>.dot`` (Graphviz) and ``.txt`` there; Grain 0.2.18 raises
  ``NotImplementedError`` for a non-empty directory instead (see docs/differences.md).

``DatasetOptions(execution_tracking_mode=STAGE_TIMING)`` applied to a pipeline (``with_options``)
asks for the same per-stage statistics, as in Grain: an iterator the user creates whose options say
so is made again with :func:`grain_core.stats.iter_with_stats` (the first one is closed unread),
without the periodic log (Grain logs only in debug mode).

The hook costs two attribute reads per ``iter()`` call while both options are off.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from grain_core import stats as _stats
from grain_core import visualize as _visualize
from grain_core.global_config import config

__all__ = ["LOG_PERIOD_S", "debug_iterator"]

_log = logging.getLogger(__name__)

#: Seconds between two execution summaries of one iterator (Grain's ``_LOG_EXECUTION_SUMMARY_PERIOD_SEC``).
LOG_PERIOD_S = 60.0

_INTERNAL = ("grain_core.", "grain_plugin_")
_graph_count = itertools.count()


def _called_from_pipeline(depth: int) -> bool:
    """Whether the ``iter()`` being made was asked for by grain_core or a plugin (not the user)."""
    frame = sys._getframe(depth)
    name = frame.f_globals.get("__name__", "")
    return name.startswith(_INTERNAL) and not name.startswith("grain_core.compat")


def _log_graph(ds: Any, directory: str) -> None:
    text = _visualize.visualize(ds, "text")
    _log.info("Grain Dataset graph:\n\n%s", text)
    if directory:
        os.makedirs(directory, exist_ok=True)
        stem = os.path.join(directory, f"grain_pipeline_{next(_graph_count)}")
        _visualize.visualize(ds, "dot", path=stem + ".dot")
        with open(stem + ".txt", "w", encoding="utf-8") as f:
            f.write(text + "\n")


class _Reporter:
    """One daemon thread logging the statistics of every live debug-mode iterator."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._iterators: list[tuple[weakref.ref, list[int]]] = []
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def add(self, it: Any) -> None:
        with self._lock:
            self._iterators.append((weakref.ref(it), [-1]))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="grain_core-debug-stats", daemon=True
                )
                self._thread.start()

    def _live(self) -> list[tuple[Any, list[int]]]:
        with self._lock:
            live = []
            for ref, last in self._iterators:
                it = ref()
                if it is not None and not getattr(it, "_closed", False):
                    live.append((it, last))
            self._iterators = [(weakref.ref(it), last) for it, last in live]
            if not live:
                self._thread = None
            return live

    def _run(self) -> None:
        while True:
            self._wake.wait(LOG_PERIOD_S)
            self._wake.clear()
            live = self._live()
            if not live:
                return
            for it, last in live:
                snapshot = _stats.collect(it)
                produced = snapshot.stages[0].elements if snapshot.stages else 0
                if produced != last[0]:
                    last[0] = produced
                    _log.info(
                        "Grain Dataset Execution Summary:\n\nNOTE: `self_s` is the time spent in a "
                        "stage itself; MapDataset stages run in several threads, so their times "
                        "are summed thread time.\n\n%s",
                        snapshot,
                    )
            del live

    def thread(self) -> threading.Thread | None:
        """The reporting thread, while there is one (for tests)."""
        return self._thread

    def wake(self) -> None:
        """Makes the thread report now (for tests)."""
        self._wake.set()


reporter = _Reporter()


def _stage_timing(it: Any) -> bool:
    """Whether the options applied to iterator ``it`` ask for ``STAGE_TIMING``."""
    mode = getattr(getattr(it, "options", None), "execution_tracking_mode", None)
    return mode is not None and mode.name == "STAGE_TIMING"


def debug_iterator(ds: Any, make: Callable[[Any], Any], local: threading.local) -> Any:
    """``iter(ds)`` as the debug options ask (installed into the dataset kernel's ``__iter__``)."""
    directory = config.py_dataset_visualization_output_dir
    debug = config.py_debug_mode
    if directory is None and not debug:
        it = make(ds)
        if not _stage_timing(it) or _called_from_pipeline(4):
            return it
        it.close()  # STAGE_TIMING in the pipeline's options: measured as in debug mode
        local.inside = True
        try:
            return _stats.iter_with_stats(ds)
        finally:
            local.inside = False
    elif _called_from_pipeline(4):
        return make(ds)
    local.inside = True
    try:
        if directory is not None:
            _log_graph(ds, directory)
        if not debug:
            return make(ds)
        it = _stats.iter_with_stats(ds)
    finally:
        local.inside = False
    reporter.add(it)
    return it
