"""Ctrl-C inside ``next()`` of a Ray iterator, then continuing it, loses and repeats nothing; nor
does a second Ctrl-C while the first one is being handled.

A real ``SIGALRM`` interval timer (``grain_core.testing.Interrupter``) raises ``KeyboardInterrupt``
wherever the main thread is inside grain_core or grain_plugin_ray code (at most once per ``next()``
call); the elements are compared with an uninterrupted run. No assertion depends on timing.
"""

from __future__ import annotations

import signal
import sys

import grain_plugin_ray
import pytest
from grain_plugin_ray import RayRuntime

import grain_core as grain
from grain_core.testing import check_interrupts, drain_with_interrupts

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

OURS = (grain, grain_plugin_ray)
_HERE = sys.modules[__name__]


def test_interrupted_next_loses_and_repeats_nothing():
    ds = grain.MapDataset.range(80).map(lambda x: x * 2).to_iter_dataset()
    options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=4)
    with iter(ds.mp_prefetch(options, runtime=RayRuntime(num_cpus=0))) as it:
        out, raised = drain_with_interrupts(it, packages=OURS)
    assert [int(x) for x in out] == [2 * x for x in range(80)], raised
    assert raised > 0


def _double(x):
    return x * 2


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
@pytest.mark.parametrize("buffer", [1, 4])
def test_second_interrupt_during_the_first_loses_and_repeats_nothing(buffer):
    """Up to three ``KeyboardInterrupt`` per ``next()`` / ``get_state()`` call (real ``SIGALRM``
    through ``check_interrupts(per_call=3)``): the later ones land while grain_core or the Ray
    channel handles the first (giving the element back, re-posting a command, re-fetching). The
    elements equal an uninterrupted run's, and states taken right after interrupts restore
    exactly the rest into new Ray iterators (a real local Ray instance, the session's)."""

    def make():
        ds = grain.MapDataset.range(60).map(_double).to_iter_dataset()
        options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=buffer)
        return ds.mp_prefetch(options, runtime=RayRuntime(num_cpus=0))

    check_interrupts(make, packages=OURS + (_HERE,), per_call=3, restores=2)


class _Double(grain.transforms.Map):
    def map(self, x):
        return _double(x)


def test_dataloader_second_interrupt_during_the_first_loses_and_repeats_nothing():
    """The same for the ``DataLoader`` with 2 workers as Ray actors and a ``Batch``."""
    n = 48

    def make():
        return grain.DataLoader(
            data_source=grain.sources.RangeDataSource(0, n, 1),
            sampler=grain.samplers.IndexSampler(
                n, shard_options=grain.sharding.NoSharding(), shuffle=True, seed=5, num_epochs=1
            ),
            operations=[_Double(), grain.transforms.Batch(batch_size=3)],
            worker_count=2,
            runtime=RayRuntime(num_cpus=0),
        )

    check_interrupts(make, packages=OURS + (_HERE,), per_call=3, restores=2)
