"""How far ``filter`` reads ahead (``FilterIterDataset``'s reads): growing to ``_MAX_AHEAD``
accepted elements while reads are quick, and no further once a read takes ``_GROW_SECONDS``, so a
costly map or test keeps its reads short. Driven with a modelled clock (no real timing)."""

from __future__ import annotations

import pytest

import grain_core as grain
from grain_core.dataset import filter_ops


class _Clock:
    """``time`` for filter_ops: ``perf_counter`` advances ``tick`` seconds per call."""

    def __init__(self, tick: float):
        self.now, self.tick = 0.0, tick

    def perf_counter(self) -> float:
        self.now += self.tick
        return self.now


def _reader():
    options = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    ds = grain.MapDataset.range(200_000).to_iter_dataset(options).filter(lambda x: x % 3 != 0)
    return iter(ds)


@pytest.mark.parametrize(
    ("tick", "most"),
    [(0.0, None), (1.0, 2)],  # quick reads grow to _MAX_AHEAD; slow ones stay where they were
)
def test_reads_grow_only_while_quick(monkeypatch, tick, most):
    monkeypatch.setattr(filter_ops, "time", _Clock(tick))
    it = _reader()
    steps, got = [], []
    for _ in range(400):
        got += it.next_chunk(64)
        steps.append(it._step)
    cls = type(it)
    if most is None:
        assert max(steps) == cls._MAX_AHEAD
    else:
        assert max(steps) <= 2 * most and steps[-1] <= most
    # How far it reads ahead changes nothing that comes out.
    assert got == [x for x in range(len(got) * 3 // 2 + 2) if x % 3 != 0][: len(got)]
