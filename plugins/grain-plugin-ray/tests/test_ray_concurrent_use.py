"""The concurrency contract on the Ray runtime's iterator: a second thread calling it while another
thread is inside gets ``ConcurrentIteratorUseError``, never a hang. Elements are held back by a
gate file the workers' map function waits for; whichever thread gets in first waits there, the
other must fail at once; then the test opens the gate (bounded waits, no timing assumption)."""

from __future__ import annotations

import os
import threading
import time

import pytest
from grain_plugin_ray import RayRuntime

import grain_core as grain
from grain_core.dataset.concurrency import ConcurrentIteratorUseError

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

BOUND = 120.0  # a hang guard for a loaded machine (Ray workers start slowly), not a speed check


class _Gated:
    def __init__(self, path):
        self.path = path

    def __call__(self, x):
        deadline = time.monotonic() + 240
        while not os.path.exists(self.path) and time.monotonic() < deadline:
            time.sleep(0.01)
        return x


def test_a_second_thread_gets_a_clear_error(tmp_path):
    gate = str(tmp_path / "gate")
    ds = (
        grain.MapDataset.range(8)
        .to_iter_dataset()
        .map(_Gated(gate))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=1), runtime=RayRuntime(num_cpus=0))
    )
    it = iter(ds)
    outcomes: dict[str, tuple[str, object]] = {}
    failed = threading.Event()

    def call(name):
        try:
            outcomes[name] = ("ok", next(it))
        except BaseException as e:  # noqa: BLE001  (recorded and checked)
            outcomes[name] = ("error", e)
            failed.set()

    threads = [threading.Thread(target=call, args=(n,), daemon=True) for n in "AB"]
    for t in threads:
        t.start()
    try:
        assert failed.wait(BOUND), "no call failed: two threads were inside one iterator"
    finally:
        open(gate, "w").close()
        for t in threads:
            t.join(BOUND)
    errors = [v for k, v in outcomes.values() if k == "error"]
    assert len(errors) == 1 and isinstance(errors[0], ConcurrentIteratorUseError), outcomes
    assert "one thread at a time" in str(errors[0])
    got = [v for k, v in outcomes.values() if k == "ok"]
    rest = list(it)
    it.close()
    assert got + rest == list(range(8))
