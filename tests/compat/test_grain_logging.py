"""Where Grain reports through ``logging`` (absl logging, which users and Grain's own tests capture
with ``assertLogs`` / ``caplog``), grain_core logs too, at the same level, with Grain's wording, and
emits no ``warnings`` warning. (``warnings`` stays where Grain warns: ``IterDataset.prefetch``'s
``DeprecationWarning``.)"""

from __future__ import annotations

import logging
import unittest
import warnings

import numpy as np
import pytest

import grain_core as grain


def _logged(caplog, fn, level=logging.WARNING) -> list[logging.LogRecord]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG), warnings.catch_warnings():
        warnings.simplefilter("error")  # a warnings.warn would fail here
        fn()
    return [r for r in caplog.records if r.levelno == level and r.name.startswith("grain_")]


def _filter_heavy():
    list(grain.MapDataset.range(3000).filter(lambda x: x % 20 == 0).to_iter_dataset())


def _iter_filter_heavy():
    # Read in chunks (map, filter and batch pass chunks); the check still sees windows of exactly
    # 1000 elements, as google grain 0.2.18 logs them ("skipped 95.00 % of the last seen 1000").
    ro = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    ds = grain.MapDataset.range(3000).to_iter_dataset(ro).map(lambda x: x)
    list(ds.filter(lambda x: x % 20 == 0).batch(4))


def _small_read_buffer():
    grain.ReadOptions(num_threads=4, prefetch_buffer_size=2)


def _dropped_remainder():
    grain.samplers.IndexSampler(10, grain.sharding.ShardOptions(0, 3, drop_remainder=True), num_epochs=1)


def _meta_limited_packing():
    docs = [{"t": np.arange(3), "m": np.arange(2)}, {"t": np.arange(2), "m": np.arange(3)}]
    list(
        grain.experimental.ConcatThenSplitIterDataset(
            grain.MapDataset.source(docs).to_iter_dataset(),
            length_struct={"t": 8, "m": 4},
            meta_features=["m"],
        )
    )


LOGGED = [
    (_filter_heavy, logging.WARNING, r"Transformation .* skipped 95\.00 % of the last seen \d+ elements"),
    (_iter_filter_heavy, logging.WARNING, r"skipped 95\.00 % of the last seen 1000 elements"),
    (_small_read_buffer, logging.WARNING, "prefetch_buffer_size=2 is smaller than num_threads=4"),
    (_dropped_remainder, logging.WARNING, r"Dropping 1 examples of 10 examples \(shard 0\)\."),
]

# Cases that need a first-party plugin besides range (not installed in the kernel's ``tests``
# session): tests/integration/test_compat_plugin_cases.py runs them.
PLUGIN_LOGGED = [
    (_meta_limited_packing, logging.ERROR, "Meta feature 'm' limited packing"),
]


@pytest.mark.parametrize(("call", "level", "pattern"), LOGGED, ids=[c[0].__name__ for c in LOGGED])
def test_grain_logs_are_logged_not_warned(caplog, call, level, pattern):
    check_logged(caplog, call, level, pattern)


def check_logged(caplog, call, level, pattern) -> None:
    """``call`` logs (not warns) a record at ``level`` whose message matches ``pattern``."""
    records = _logged(caplog, call, level)
    assert records, f"{call.__name__} logged nothing at {logging.getLevelName(level)}"
    import re

    assert any(re.search(pattern, r.getMessage()) for r in records), [r.getMessage() for r in records]


def test_quiet_cases_log_nothing(caplog):
    assert not _logged(caplog, lambda: grain.ReadOptions(num_threads=4, prefetch_buffer_size=0))
    assert not _logged(caplog, lambda: grain.ReadOptions(num_threads=4, prefetch_buffer_size=4))
    assert not _logged(
        caplog,
        lambda: grain.samplers.IndexSampler(9, grain.sharding.ShardOptions(0, 3, drop_remainder=True), num_epochs=1),
    )


class AssertLogsTest(unittest.TestCase):
    """Grain's own tests capture these with ``assertLogs`` on the root logger."""

    def test_assert_logs_sees_the_filter_warning(self):
        with self.assertLogs(level="WARNING") as logs:
            _filter_heavy()
        self.assertTrue(any("skipped" in line for line in logs.output))


def test_prefetch_alias_still_warns_as_grain():
    ds = grain.MapDataset.range(3).to_iter_dataset()
    with pytest.warns(DeprecationWarning, match="mp_prefetch"):
        ds.prefetch(grain.MultiprocessingOptions(num_workers=0))
