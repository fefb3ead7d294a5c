"""The concurrency contract on interleave's iterator (with and without reader threads): a second
thread calling it while another thread is inside gets ``ConcurrentIteratorUseError``, never a hang.
Whichever thread gets in first waits on a gated dataset; the other must fail at once; the test
then opens the gate (bounded waits everywhere, no timing assumption)."""

from __future__ import annotations

import threading

import pytest

import grain_core as grain
from grain_core.dataset.concurrency import ConcurrentIteratorUseError

pytestmark = pytest.mark.timeout(300)

BOUND = 60.0


@pytest.mark.parametrize("second", ["next", "get_state"])
@pytest.mark.parametrize("kw", [{}, {"iter_buffer_size": 2, "num_make_iter_threads": 1}])
def test_a_second_thread_gets_a_clear_error(kw, second):
    gate = threading.Event()

    def gated(x):
        gate.wait(120)  # bounded: the test always sets it
        return x

    ro = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    datasets = [grain.MapDataset.range(3 * d, 3 * d + 3).to_iter_dataset(ro).map(gated) for d in range(3)]
    it = iter(grain.experimental.InterleaveIterDataset(datasets, cycle_length=2, **kw))
    outcomes: dict[str, tuple[str, object]] = {}
    failed = threading.Event()

    def call(name, fn):
        try:
            outcomes[name] = ("ok", fn())
        except BaseException as e:  # noqa: BLE001  (recorded and checked)
            outcomes[name] = ("error", e)
            failed.set()

    threads = [
        threading.Thread(target=call, args=("A", lambda: next(it)), daemon=True),
        threading.Thread(
            target=call, args=("B", (lambda: next(it)) if second == "next" else it.get_state),
            daemon=True,
        ),
    ]
    for t in threads:
        t.start()
    try:
        assert failed.wait(BOUND), "no call failed: two threads were inside one iterator"
    finally:
        gate.set()
        for t in threads:
            t.join(BOUND)
    errors = [v for k, v in outcomes.values() if k == "error"]
    assert len(errors) == 1 and isinstance(errors[0], ConcurrentIteratorUseError), outcomes
    assert "is inside this iterator" in str(errors[0])
    rest = list(it)
    it.close()
    got = [v for k, v in outcomes.values() if k == "ok" and isinstance(v, int)]
    assert sorted(got + rest) == list(range(9))
