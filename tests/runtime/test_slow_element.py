"""A slow element does not hold back the elements finished before it (no head-of-line blocking):
the consumer receives every element before a blocked one while it is still blocked."""

from __future__ import annotations

import os
import time

import pytest

import grain_core as grain

pytestmark = pytest.mark.timeout(240)


def _blocking_at(index, flag):
    def produce(x):
        if x == index:
            deadline = time.monotonic() + 120  # a safety net, not a measurement
            while not os.path.exists(flag):
                if time.monotonic() > deadline:
                    return "gave up waiting"
                time.sleep(0.01)
        return x

    return produce


@pytest.mark.parametrize("k,buffer", [(1, 64), (2, 16), (3, 8)])
def test_elements_before_a_blocked_one_are_delivered(tmp_path, k, buffer):
    flag = str(tmp_path / "release")
    blocked = 30
    ds = (
        grain.MapDataset.range(60)
        .to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
        .map(_blocking_at(blocked, flag))  # runs in the worker, element by element
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=k, per_worker_buffer_size=buffer))
    )
    with iter(ds) as it:
        head = [next(it) for _ in range(blocked)]  # all finished before element 30 is
        open(flag, "w").close()
        rest = list(it)
    assert head == list(range(blocked))
    assert rest == list(range(blocked, 60))

