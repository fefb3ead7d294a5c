"""Ctrl-C inside ``next()`` of a Ray iterator, then continuing it, loses and repeats nothing.

A real ``SIGALRM`` interval timer raises ``KeyboardInterrupt`` wherever the main thread is inside
grain_core or grain_plugin_ray code (at most once per ``next()`` call); the elements are compared
with an uninterrupted run. No assertion depends on timing.
"""

from __future__ import annotations

import os
import signal

import grain_plugin_ray
import pytest
from grain_plugin_ray import RayRuntime

import grain_core as grain

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]

OURS = tuple(os.path.dirname(m.__file__) + os.sep for m in (grain, grain_plugin_ray))


class Interrupter:
    def __init__(self, interval: float = 0.0003):
        self.interval, self.armed, self.raised = interval, False, 0

    def _handler(self, signum, frame):
        if self.armed and frame is not None and frame.f_code.co_filename.startswith(OURS):
            self.armed = False
            self.raised += 1
            raise KeyboardInterrupt

    def __enter__(self):
        self.old = signal.signal(signal.SIGALRM, self._handler)
        signal.setitimer(signal.ITIMER_REAL, self.interval, self.interval)
        return self

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, self.old)


def test_interrupted_next_loses_and_repeats_nothing():
    ds = grain.MapDataset.range(80).map(lambda x: x * 2).to_iter_dataset()
    options = grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=4)
    out = []
    with iter(ds.mp_prefetch(options, runtime=RayRuntime(num_cpus=0))) as it:
        with Interrupter() as intr:
            while True:
                intr.armed = True
                try:
                    x = next(it)
                except KeyboardInterrupt:
                    continue
                except StopIteration:
                    break
                finally:
                    intr.armed = False
                out.append(int(x))
    assert out == [2 * x for x in range(80)], intr.raised
    assert intr.raised > 0
