"""The concurrency contract: a second thread calling an iterator while another thread is inside it
gets ``ConcurrentIteratorUseError`` (a clear message), never a hang, on every iterator kind.

Two threads call the same iterator at once while its elements are held back by a gate (a file the
pipeline's map function waits for, so it works in worker processes too): whichever thread is
inside waits there, the other must fail at once. The test waits (bounded) until one of them has
failed, opens the gate, and checks that exactly one call failed, with the message, and that the
other got the first element. No assertion depends on timing: which thread wins does not matter.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

import grain_core as grain
from grain_core import experimental
from grain_core.dataset.concurrency import ConcurrentIteratorUseError

pytestmark = pytest.mark.timeout(300)

BOUND = 60.0  # seconds: a hang guard for a loaded machine, not a speed check


class _Gated:
    """A picklable map function returning its input once ``path`` exists (waits at most 120 s)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, x):
        deadline = time.monotonic() + 120
        while not os.path.exists(self.path) and time.monotonic() < deadline:
            time.sleep(0.005)
        return x


def _ro():
    return grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _kernel_map_dataset(fn):  # PrefetchDatasetIterator: fn runs in the caller's thread
    return grain.MapDataset.range(8).map(fn).to_iter_dataset(_ro())


def _kernel_iter_stage(fn):  # an IterDataset stage (map) over to_iter_dataset
    return grain.MapDataset.range(8).to_iter_dataset(_ro()).map(fn)


def _kernel_batch(fn):
    return grain.MapDataset.range(8).to_iter_dataset(_ro()).map(fn).batch(2)


def _thread_prefetch(fn):  # fn runs in the prefetch thread; the caller waits in next()
    return experimental.ThreadPrefetchIterDataset(_kernel_iter_stage(fn), prefetch_buffer_size=2)


def _mp_prefetch(fn):  # fn runs in a worker process
    return _kernel_iter_stage(fn).mp_prefetch(grain.MultiprocessingOptions(num_workers=1))


def _device_put(fn):
    import jax

    return experimental.device_put(_kernel_iter_stage(fn), jax.devices()[0])


class _DataLoaderDataset:
    """Makes ``iter(...)`` of a DataLoader look like the other kinds."""

    def __init__(self, fn, workers):
        self._loader = grain.DataLoader(
            data_source=list(range(8)),
            sampler=grain.IndexSampler(8, shuffle=False, seed=0, num_epochs=1),
            operations=[_GatedMap(fn)],
            worker_count=workers,
            read_options=_ro(),
        )

    def __iter__(self):
        return iter(self._loader)


class _GatedMap(grain.transforms.Map):
    def __init__(self, fn):
        self._fn = fn

    def map(self, x):
        return self._fn(x)


KINDS = {
    "to_iter_dataset": _kernel_map_dataset,
    "iter_map": _kernel_iter_stage,
    "batch": _kernel_batch,
    # mix serves next() from its chunk before the guard (concurrency.py, "Fast paths")
    "mix": lambda fn: grain.IterDataset.mix([_kernel_iter_stage(fn), _kernel_iter_stage(fn)]),
    "thread_prefetch": _thread_prefetch,
    "mp_prefetch": _mp_prefetch,
    "device_put": _device_put,
    "dataloader": lambda fn: _DataLoaderDataset(fn, 0),
    "dataloader_workers": lambda fn: _DataLoaderDataset(fn, 1),
}


def _race(it, second: str, gate: str):
    """Thread A calls ``next(it)``, thread B calls ``second`` at the same time; returns their
    outcomes once the gate was opened after the first failure."""
    outcomes: dict[str, object] = {}
    failed = threading.Event()

    def call(name, fn):
        try:
            outcomes[name] = ("ok", fn())
        except BaseException as e:  # noqa: BLE001  (recorded and checked)
            outcomes[name] = ("error", e)
            failed.set()

    calls = {
        "next": lambda: next(it),
        "get_state": it.get_state,
        "set_state": lambda: it.set_state(state),
    }
    state = it.get_state() if second == "set_state" else None
    threads = [
        threading.Thread(target=call, args=("A", calls["next"]), daemon=True),
        threading.Thread(target=call, args=("B", calls[second]), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        assert failed.wait(BOUND), "no call failed: two threads were inside one iterator"
    finally:
        open(gate, "w").close()
        for t in threads:
            t.join(BOUND)
    assert not any(t.is_alive() for t in threads), "a call did not return after the gate opened"
    return outcomes


@pytest.mark.parametrize("second", ["next", "get_state", "set_state"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_second_thread_gets_a_clear_error_never_a_hang(kind, second, tmp_path):
    gate = str(tmp_path / "gate")
    ds = KINDS[kind](_Gated(gate))
    it = iter(ds)
    try:
        outcomes = _race(it, second, gate)
        errors = [v for kind_, v in outcomes.values() if kind_ == "error"]
        assert len(errors) == 1, outcomes
        error = errors[0]
        assert isinstance(error, ConcurrentIteratorUseError), repr(error)
        message = str(error)
        assert "is inside this iterator" in message
        assert "one thread at a time" in message and "threading.Lock" in message
        ok = [v for kind_, v in outcomes.values() if kind_ == "ok"]
        assert len(ok) == 1
        # The iterator still works from one thread afterwards.
        rest = list(it)
        assert rest
    finally:
        it.close()


def test_one_thread_after_another_is_fine():
    it = iter(grain.MapDataset.range(6).to_iter_dataset(_ro()).map(lambda x: x + 1))
    got = []
    for _ in range(3):
        t = threading.Thread(target=lambda: got.append(next(it)))
        t.start()
        t.join(BOUND)
    assert got == [1, 2, 3] and list(it) == [4, 5, 6]


def test_nested_calls_of_one_thread_are_fine():
    """set_state calls get_state on the same iterator (its rollback snapshot) in the same thread."""
    it = iter(grain.MapDataset.range(6).to_iter_dataset(_ro()).map(lambda x: x).batch(2))
    next(it)
    state = it.get_state()
    assert next(it).tolist() == [2, 3]
    it.set_state(state)
    assert next(it).tolist() == [2, 3]
    it.close()
