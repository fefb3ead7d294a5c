"""Elastic restore across ``mp_prefetch`` worker counts (``grain_core.dataset.elastic``): a state saved
with K workers (0: in process) restores with K' workers, every element exactly once over the epoch;
pipelines where it is not defined are refused with the reason, leaving the iterator unchanged."""

from __future__ import annotations

import asyncio
import copy

import pytest

import grain_core as grain
from grain_core.dataset import elastic
from grain_core.dataset.fingerprints import map_fingerprint_parts
from grain_core.runtime.multiprocess import MultiprocessPrefetchDatasetIterator
from grain_core.state import StateMismatchError

pytestmark = pytest.mark.timeout(120)

MP = grain.MultiprocessingOptions
R = grain.MapDataset.range
N = 37


def _pipe(k: int, n: int = N, seed: int = 5):
    ds = (
        R(n)
        .seed(seed)
        .shuffle()
        .map(lambda x: x)
        .to_iter_dataset(grain.ReadOptions(num_threads=1))
        .random_map(lambda x, r: (int(x), int(r.integers(1 << 30))))
    )
    ds = grain.experimental.ThreadPrefetchIterDataset(ds, 2)
    return ds.mp_prefetch(MP(num_workers=k)) if k else ds


def _read(it, n):
    return [next(it) for _ in range(n)]


def _close(it):
    getattr(it, "close", lambda: None)()


_REFERENCE: dict[int, list] = {}


def _reference(k: int) -> list:
    if k not in _REFERENCE:
        it = iter(_pipe(k))
        _REFERENCE[k] = list(it)
        _close(it)
    return _REFERENCE[k]


def _restore(it, state, tmp_path=None):
    """mp iterators convert in set_state; an in-process chain through the checkpoint API."""
    if not isinstance(it, MultiprocessPrefetchDatasetIterator):
        d = tmp_path
        grain.checkpoint.write_state_file(d, state, 0, 1)
        asyncio.run(it.load(d))
    else:
        it.set_state(state)


@pytest.mark.parametrize("k2", [0, 1, 2, 3])
@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_every_element_exactly_once_across_worker_counts(k, k2, tmp_path):
    for i, stop in enumerate((0, 11, N)):
        with iter(_pipe(k)) as it:
            first = _read(it, stop)
            state = it.get_state()
        assert first == _reference(k)[:stop]
        with iter(_pipe(k2)) as it2:
            _restore(it2, state, tmp_path / str(i))
            rest = list(it2)
        xs = [x for x, _ in first + rest]
        assert sorted(xs) == list(range(N)), (k, k2, stop)
        # From the restore on: exactly an uninterrupted run with k2 workers (randomness included).
        assert rest == _reference(k2)[stop:]


def test_restore_mid_message_and_twice():
    with iter(_pipe(2)) as it:
        first = _read(it, 3)
        s0 = it.get_state()
        first += _read(it, 2)
        s1 = it.get_state()
    # Position 5 named as a state without a mark inside a message would name it: worker states of
    # position 3, skipping the elements returned since (one per worker, round robin).
    s1 = copy.deepcopy(s1)
    s1["workers"] = copy.deepcopy(s0["workers"])
    for w in range(2):
        s1["workers"][w]["skip"] += 1
    with iter(_pipe(3)) as it3:
        it3.set_state(s1)
        mid = _read(it3, 7)
        s2 = it3.get_state()
    with iter(_pipe(1)) as it1:
        it1.set_state(s2)
        rest = list(it1)
    assert sorted(x for x, _ in first + mid + rest) == list(range(N))


def test_infinite_and_batched_map_dataset():
    def pipe(k):
        return (
            R(10).repeat().batch(3).to_iter_dataset().map(lambda b: b.tolist()).mp_prefetch(MP(k))
        )

    with iter(pipe(2)) as it:
        first = _read(it, 9)
        state = it.get_state()
    with iter(pipe(3)) as it:
        it.set_state(state)
        rest = _read(it, 8)
    with iter(pipe(3)) as it:
        assert first + rest == _read(it, 17)  # one-to-one: the same order for any worker count


# --- refusals ----------------------------------------------------------------------------------------


def _refused(make, match, k=2, k2=3, advance=4):
    with iter(make(k)) as it:
        _read(it, advance)
        state = it.get_state()
    with iter(make(k2)) as it2:
        before = it2.get_state()
        with pytest.raises(StateMismatchError, match=match) as e:
            it2.set_state(state)
        assert it2.get_state() == before
        with iter(make(k2)) as fresh:
            assert repr(_read(it2, 3)) == repr(_read(fresh, 3))
    return str(e.value)


def test_refused_filter_in_map_dataset():
    msg = _refused(
        lambda k: R(40).filter(lambda x: x % 3).to_iter_dataset().mp_prefetch(MP(k)), "filter"
    )
    assert "num_workers=2" in msg and "num_workers=3" in msg and "after mp_prefetch" in msg


def test_filter_with_allow_nones_is_elastic():
    def pipe(k):
        return R(40).filter(lambda x: x % 3).to_iter_dataset(allow_nones=True).mp_prefetch(MP(k))

    with iter(pipe(2)) as it:
        first = _read(it, 13)
        state = it.get_state()
    with iter(pipe(3)) as it:
        it.set_state(state)
        rest = list(it)
    assert first + rest == list(iter(pipe(0)))


@pytest.mark.parametrize(
    ("stage", "name"),
    [
        (lambda d: d.batch(3), "BatchIterDataset"),
        (lambda d: d.filter(lambda x: x % 2), "FilterIterDataset"),
        (lambda d: grain.experimental.LimitIterDataset(d, 30), "LimitIterDataset"),
    ],
)
def test_refused_many_to_one_iter_stage(stage, name):
    msg = _refused(lambda k: stage(R(40).to_iter_dataset()).mp_prefetch(MP(k)), name)
    assert "not one-to-one" in msg


def test_refused_mix_before_mp_prefetch():
    def make(k):
        mixed = grain.IterDataset.mix([R(20).to_iter_dataset(), R(100, 120).to_iter_dataset()])
        return mixed.mp_prefetch(MP(k))

    _refused(make, "MixedIterDataset|not one-to-one")


def test_refused_other_pipeline():
    _refused(lambda k: _pipe(k, seed=5 if k == 2 else 6), "fingerprint")


def test_refused_state_that_is_not_a_prefix():
    with iter(_pipe(2)) as it:
        _read(it, 6)
        state = copy.deepcopy(it.get_state())
    state["workers"][1]["skip"] += 2  # worker 1 two elements ahead of a round-robin prefix
    with iter(_pipe(3)) as it3:
        with pytest.raises(StateMismatchError, match="not a prefix"):
            it3.set_state(state)


def test_chain_restore_refuses_non_elastic_mp_state(tmp_path):
    with iter(R(20).to_iter_dataset().batch(2).mp_prefetch(MP(2))) as it:
        _read(it, 2)
        grain.checkpoint.write_state_file(tmp_path, it.get_state(), 0, 1)
    chain = iter(R(20).to_iter_dataset().batch(2))
    before = chain.get_state()
    with pytest.raises(grain.checkpoint.CheckpointPipelineMismatchError, match="BatchIterDataset"):
        asyncio.run(chain.load(tmp_path))
    assert chain.get_state() == before


# --- helpers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 7, 12])
@pytest.mark.parametrize(("start", "step"), [(0, 1), (1, 3), (2, 2), (5, 4)])
def test_slice_parts_mirror_slice_map_dataset(n, start, step):
    ds = R(n).seed(1).shuffle().map(lambda x: x)
    assert elastic._slice_parts(map_fingerprint_parts(ds), start, step) == map_fingerprint_parts(
        ds.slice(slice(start, None, step))
    )


def test_prefix_arithmetic():
    for s in (1, 2, 3, 5):
        for g in range(20):
            counts = elastic.split_prefix(g, s)
            assert sum(counts) == g
            assert elastic.prefix_length(counts) == g
    with pytest.raises(elastic.NotElasticError):
        elastic.prefix_length([1, 2])


def test_thread_prefetch_in_workers_restores_to_the_start():
    # Regression: the worker's template (taken after set_slice) must not hold the unsliced parent
    # state cached by ThreadPrefetchDatasetIterator at construction.
    with iter(_pipe(2)) as it:
        start = it.get_state()
        _read(it, 5)
        it.set_state(start)
        assert list(it) == _reference(2)
