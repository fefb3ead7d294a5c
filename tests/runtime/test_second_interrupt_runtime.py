"""A second Ctrl-C while the first one is being handled loses and repeats nothing, for the
``DataLoader``'s iterator (in process and with worker processes) and ``device_put`` (with and
without thread prefetch under it).

Real ``SIGALRM`` interrupts through :func:`grain_core.testing.check_interrupts` with
``per_call=3``: up to three ``KeyboardInterrupt`` per call, the later ones landing while grain_core
handles the first (giving the element back, rolling a commit back, closing). Each test compares
the elements with an uninterrupted run and restores states taken right after interrupts into new
iterators. Nothing asserts a duration or where an interrupt landed.
"""

from __future__ import annotations

import signal
import sys

import numpy as np
import pytest

import grain_core as grain
from grain_core.testing import check_interrupts

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers"),
]

_HERE = sys.modules[__name__]


def _work(x):
    a = np.arange(200, dtype=np.float64) + float(np.asarray(x).sum())
    for _ in range(3):
        a = np.sqrt(a * a + 1.0)
    return x


class _Work(grain.transforms.Map):
    def map(self, x):
        return _work(x)


def _loader(n: int, workers: int, batch: int | None):
    operations: list = [_Work()]
    if batch:
        operations.append(grain.transforms.Batch(batch_size=batch))
    return grain.DataLoader(
        data_source=grain.sources.RangeDataSource(0, n, 1),
        sampler=grain.samplers.IndexSampler(
            n, shard_options=grain.sharding.NoSharding(), shuffle=True, seed=5, num_epochs=1
        ),
        operations=operations,
        worker_count=workers,
    )


@pytest.mark.parametrize(
    "workers,batch", [(0, None), (0, 4), (2, None), (2, 3)], ids=["0", "0-batch", "2", "2-batch"]
)
def test_dataloader_second_interrupt_during_the_first_loses_nothing(workers, batch):
    n = 150
    check_interrupts(lambda: _loader(n, workers, batch), packages=(grain, _HERE), per_call=3)


@pytest.mark.parametrize("cpu_buffer", [0, 3])
def test_device_put_second_interrupt_during_the_first_loses_nothing(cpu_buffer):
    jax = pytest.importorskip("jax")

    def make():
        ds = grain.MapDataset.range(300).map(_work).to_iter_dataset(
            grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
        )
        return grain.experimental.device_put(
            ds, jax.devices()[0], cpu_buffer_size=cpu_buffer, device_buffer_size=2
        )

    check_interrupts(make, packages=(grain, _HERE), per_call=3)
