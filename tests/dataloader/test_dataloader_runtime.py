"""``DataLoader(..., runtime=...)``: the workers run on the runtime given, exactly as
``mp_prefetch(..., runtime=...)``; elements, order and state do not depend on it."""

from __future__ import annotations

import dataclasses

import pytest

import grain_core as grain
from grain_core.runtime.processes import ProcessRuntime


@dataclasses.dataclass
class CountingRuntime:
    """The process runtime, counting the worker pools it started (proves the loader used it)."""

    inner: ProcessRuntime = dataclasses.field(default_factory=ProcessRuntime)
    started: list[int] = dataclasses.field(default_factory=list)

    def start_workers(self, job):
        self.started.append(job.worker_count)
        return self.inner.start_workers(job)


def _loader(**kw):
    return grain.DataLoader(
        data_source=list(range(24)),
        sampler=grain.IndexSampler(24, shuffle=True, seed=3, num_epochs=1),
        operations=[grain.transforms.Batch(batch_size=3)],
        **kw,
    )


def _ints(batches):
    return [b.tolist() for b in batches]


def test_the_runtime_object_runs_the_workers_with_the_process_runtime_s_elements_and_state():
    runtime = CountingRuntime()
    with iter(_loader(worker_count=2)) as it:
        expected = _ints(it)
    with iter(_loader(worker_count=2, runtime=runtime)) as it:
        head = _ints(next(it) for _ in range(3))
        state = it.get_state()
    assert runtime.started == [2]
    # A state of the given runtime continues on the default one, and back.
    with iter(_loader(worker_count=2)) as it:
        it.set_state(state)
        rest = _ints(it)
    assert head + rest == expected
    with iter(_loader(worker_count=2, runtime=runtime)) as it:
        it.set_state(state)
        assert _ints(it) == rest
    assert runtime.started == [2, 2]


def test_a_runtime_name_selects_the_registered_runtime():
    with iter(_loader(worker_count=2, runtime="processes")) as it:
        got = _ints(it)
    with iter(_loader(worker_count=2)) as it:
        assert got == _ints(it)


def test_a_bad_runtime_is_refused_at_construction_even_without_workers():
    with pytest.raises(ValueError, match="no runtime named 'nope'"):
        _loader(worker_count=0, runtime="nope")
    with pytest.raises(TypeError, match="start_workers"):
        _loader(worker_count=2, runtime=object())


def test_load_passes_the_runtime_to_its_loader():
    runtime = CountingRuntime()
    loader = grain.load(list(range(12)), num_epochs=1, batch_size=4, worker_count=2, runtime=runtime)
    with iter(loader) as it:
        assert sorted(x for b in _ints(it) for x in b) == list(range(12))
    assert runtime.started == [2]
