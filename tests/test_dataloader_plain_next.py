"""``DataLoader`` without workers: its iterator calls the pipeline's ``__next__`` itself (what
``next_or_rollback`` does for an iterator without rollback marks), once it has seen that the
pipeline has none; Ctrl-C still loses or repeats no element, and restores stay exact."""

from __future__ import annotations

import signal

import pytest

import grain_core as grain
from grain_core.testing import drain_with_interrupts


def _loader(n: int, batch: int | None = None) -> grain.DataLoader:
    ops = [] if batch is None else [grain.transforms.Batch(batch_size=batch)]
    return grain.DataLoader(
        data_source=grain.sources.RangeDataSource(0, n, 1),
        sampler=grain.samplers.IndexSampler(
            n, shard_options=grain.sharding.NoSharding(), shuffle=True, seed=3, num_epochs=1
        ),
        operations=ops,
        worker_count=0,
    )


def _expected(n: int) -> list[int]:
    return [int(x) for x in iter(_loader(n))]


def test_the_pipeline_is_called_directly_after_the_first_element():
    it = iter(_loader(50))
    first = next(it)
    assert it._plain_it is it._it  # found without rollback marks: the direct call from now on
    rest = list(it)
    assert [int(first)] + [int(x) for x in rest] == _expected(50)
    assert it._plain_it is None  # released with the pipeline at the end


def test_restores_are_exact_with_the_direct_call():
    loader = _loader(120, batch=8)
    it = iter(loader)
    head = [next(it).tolist() for _ in range(5)]
    state = it.get_state()
    rest = [b.tolist() for b in it]
    again = iter(loader)
    again.set_state(state)
    assert [b.tolist() for b in again] == rest
    fresh = iter(loader)
    assert [b.tolist() for b in fresh] == head + rest


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_interrupts_lose_and_repeat_nothing():
    n = 2000
    out, _ = drain_with_interrupts(iter(_loader(n)))
    assert [int(x) for x in out] == _expected(n)
