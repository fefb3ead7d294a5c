"""``WindowShuffleIterDataset``'s ``next()`` serves its buffered window before the thread guard
(``grain_core.author.list_serving_next``): one thread at a time still holds, statistics still
count every element, and the order and states are those of the guarded path."""

from __future__ import annotations

import threading

import pytest
from grain_plugin_window_shuffle import WindowShuffleIterDataset

import grain_core as grain
from grain_core import stats

BOUND = 20.0  # seconds any wait may take
_RO0 = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def test_a_second_thread_is_refused_while_the_first_reads_a_window():
    entered, release = threading.Event(), threading.Event()

    def gate(x):
        if x == 8:  # the second window's first element: the reader waits inside next()
            entered.set()
            assert release.wait(BOUND)
        return x

    ds = WindowShuffleIterDataset(
        grain.MapDataset.range(24).to_iter_dataset(_RO0).map(gate), window_size=8, seed=1
    )
    it = iter(ds)
    first = [next(it) for _ in range(8)]  # the first window, all served
    got: dict[str, object] = {}

    def reader():
        try:
            got["A"] = next(it)
        except BaseException as e:  # noqa: BLE001  (recorded and checked)
            got["A"] = e

    a = threading.Thread(target=reader, daemon=True)
    a.start()
    try:
        assert entered.wait(BOUND), "the first thread never reached the parent"
        with pytest.raises(RuntimeError, match="is inside this iterator"):  # ConcurrentIteratorUseError
            next(it)
    finally:
        release.set()
        a.join(BOUND)
    assert not a.is_alive()
    rest = [got["A"], *it]
    assert sorted(first) == list(range(8)) and sorted(rest) == list(range(8, 24))


def test_statistics_count_every_element_served_from_the_window():
    ds = WindowShuffleIterDataset(
        grain.MapDataset.range(50).to_iter_dataset(_RO0), window_size=8, seed=2
    )
    plain = list(ds)
    it = stats.iter_with_stats(ds)
    assert list(it) == plain
    top = stats.collect(it).stages[0]
    assert "WindowShuffle" in top.name and top.elements == 50, stats.collect(it)
