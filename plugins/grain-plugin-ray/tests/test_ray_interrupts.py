"""Ctrl-C inside ``next()`` of a Ray iterator, then continuing it, loses and repeats nothing.

A real ``SIGALRM`` interval timer (``grain_core.testing.Interrupter``) raises ``KeyboardInterrupt``
wherever the main thread is inside grain_core or grain_plugin_ray code (at most once per ``next()``
call); the elements are compared with an uninterrupted run. No assertion depends on timing.
"""

from __future__ import annotations

import grain_plugin_ray
import pytest
from grain_plugin_ray import RayRuntime

import grain_core as grain
from grain_core.testing import drain_with_interrupts

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

OURS = (grain, grain_plugin_ray)


def test_interrupted_next_loses_and_repeats_nothing():
    ds = grain.MapDataset.range(80).map(lambda x: x * 2).to_iter_dataset()
    options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=4)
    with iter(ds.mp_prefetch(options, runtime=RayRuntime(num_cpus=0))) as it:
        out, raised = drain_with_interrupts(it, packages=OURS)
    assert [int(x) for x in out] == [2 * x for x in range(80)], raised
    assert raised > 0
