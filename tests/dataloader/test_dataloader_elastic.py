"""A DataLoader state restores on another worker count with batches per worker: exactly once.

Every record id read before the save plus every one read after the restore is each record of the
epoch once (``drop_remainder=False``). ``grain_core.checkpoint.dataloader_elastic`` is the code.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import Even, PlusOne, Twice

import grain_core as grain
import grain_core.python
from grain_core.checkpoint.dataloader_elastic import Remaining
from grain_core.dataset.elastic import NotElasticError
from grain_core.state import InvalidStateError, StateMismatchError

N = 60


def _loader(workers, how="op", ops=(), n=N, drop_remainder=False):
    if how == "batch_size":
        return grain.load(
            list(range(n)),
            num_epochs=1,
            shuffle=True,
            seed=7,
            transformations=list(ops),
            batch_size=4,
            drop_remainder=drop_remainder,
            worker_count=workers,
        )
    return grain.DataLoader(
        data_source=list(range(n)),
        sampler=grain.IndexSampler(n, shuffle=True, seed=7, num_epochs=1),
        operations=[*ops, grain.transforms.Batch(4, drop_remainder=drop_remainder)],
        worker_count=workers,
    )


def _ids(batches):
    return [int(x) for b in batches for x in np.asarray(b).ravel()]


def _take(it, count):
    return [next(it) for _ in range(count)]


@pytest.mark.parametrize("how", ["op", "batch_size"])
@pytest.mark.parametrize("saved,restored", [(2, 1), (2, 3), (0, 2)])
def test_state_moves_to_another_worker_count_exactly_once(has_runtime, how, saved, restored):
    with iter(_loader(saved, how)) as it:
        before = _take(it, 3)
        state = it.get_state()
    with iter(_loader(restored, how)) as it:
        it.set_state(state)
        middle = _take(it, 2)
        state2 = it.get_state()
        after = list(it)
    assert sorted(_ids(before + middle + after)) == list(range(N))
    assert json.loads(state2)["worker_count"] == restored
    # The restored loader's state restores again, on its own count (same elements) ...
    with iter(_loader(restored, how)) as it:
        it.set_state(state2)
        assert _ids(list(it)) == _ids(after)
    # ... and on the first count (restores compose).
    with iter(_loader(saved, how)) as it:
        it.set_state(state2)
        again = list(it)
    assert sorted(_ids(before + middle + again)) == list(range(N))


def test_filtered_batches_per_worker_move_exactly_once(has_runtime):
    ops = [PlusOne(), Even()]  # x + 1, kept when even: 2, 4, ..., N
    with iter(_loader(2, ops=ops)) as it:
        before = _take(it, 3)
        state = it.get_state()
    with iter(_loader(1, ops=ops)) as it:
        it.set_state(state)
        after = list(it)
    assert sorted(_ids(before + after)) == list(range(2, N + 1, 2))


def test_a_shards_state_moves_within_its_shard(has_runtime):
    def shard_loader(workers):
        return grain.DataLoader(
            data_source=list(range(N)),
            sampler=grain.IndexSampler(N, shuffle=True, seed=7, num_epochs=1),
            operations=[grain.transforms.Batch(4)],
            shard_options=grain.ShardOptions(1, 2),
            worker_count=workers,
        )

    with iter(shard_loader(0)) as it:
        shard = sorted(_ids(list(it)))
    with iter(shard_loader(2)) as it:
        before = _take(it, 3)
        state = it.get_state()
    with iter(shard_loader(3)) as it:
        it.set_state(state)
        after = list(it)
    assert len(shard) == N // 2 and sorted(_ids(before + after)) == shard


def test_workers_to_in_process_exactly_once(has_runtime):
    with iter(_loader(3)) as it:
        before = _take(it, 4)
        state = it.get_state()
    with iter(_loader(0)) as it:
        it.set_state(state)
        after = list(it)
    assert sorted(_ids(before + after)) == list(range(N))


def test_drop_remainder_never_repeats_a_record(has_runtime):
    """Each worker drops its own last incomplete batch, so which records are dropped depends on the
    worker count; none is ever read twice."""
    with iter(_loader(2, drop_remainder=True, n=30)) as it:
        before = _take(it, 3)
        state = it.get_state()
    with iter(_loader(3, drop_remainder=True, n=30)) as it:
        it.set_state(state)
        after = list(it)
    ids = _ids(before + after)
    assert len(ids) == len(set(ids)) and set(ids) <= set(range(30))
    assert all(len(b) == 4 for b in before + after)
    assert 30 - len(ids) < 3 * 4  # at most one incomplete batch per worker dropped


def test_flat_map_move_is_refused_saying_why(has_runtime):
    with iter(_loader(2, ops=[Twice()])) as it:
        next(it)
        state = it.get_state()
    with iter(_loader(1, ops=[Twice()])) as it:
        expected = _ids(_take(it, 2))
    with iter(_loader(1, ops=[Twice()])) as it:
        next(it)
        with pytest.raises(NotElasticError, match=r"worker_count=2.*worker_count=1.*FlatMap"):
            it.set_state(state)
        assert _ids([next(it)]) == expected[4:]  # untouched: it goes on where it was
    with iter(_loader(2, ops=[Twice()])) as it:  # the same count restores as always
        it.set_state(state)
        next(it)


class KeepAll(grain.python.Operation):
    """A legacy custom Operation: a function over the iterator of records."""

    def __call__(self, input_iterator):
        yield from input_iterator


def test_custom_operation_move_is_refused_saying_why(has_runtime):
    def custom_loader(workers):
        return grain.DataLoader(
            data_source=list(range(N)),
            sampler=grain.IndexSampler(N, shuffle=True, seed=7, num_epochs=1),
            operations=[KeepAll()],
            worker_count=workers,
        )

    with iter(custom_loader(0)) as it:
        next(it)
        state = it.get_state()
    with iter(custom_loader(1)) as it:
        with pytest.raises(NotElasticError, match=r"worker_count=0.*worker_count=1.*custom legacy Op"):
            it.set_state(state)


def test_a_state_of_another_pipeline_is_refused_naming_both_counts(has_runtime):
    with iter(_loader(2)) as it:
        next(it)
        state = it.get_state()
    other = grain.DataLoader(
        data_source=list(range(N)),
        sampler=grain.IndexSampler(N, shuffle=True, seed=7, num_epochs=1),
        operations=[PlusOne(), grain.transforms.Batch(4)],
        worker_count=1,
    )
    with iter(other) as it:
        with pytest.raises(StateMismatchError, match=r"worker_count=2.*worker_count=1"):
            it.set_state(state)


def test_malformed_remaining_is_refused_before_anything_changes():
    with iter(_loader(0)) as it:
        expected = _ids(_take(it, 2))
    with iter(_loader(0)) as it:
        state = json.loads(it.get_state())
        next(it)
        for bad in ({"holes": [5, 3], "tail": 9}, {"holes": [9], "tail": 9}, {"holes": "x"}):
            state["remaining"] = bad
            with pytest.raises(InvalidStateError):
                it.set_state(json.dumps(state).encode())
        assert _ids([next(it)]) == expected[4:]


def test_remaining_after_re_splits_what_workers_left():
    whole = Remaining()
    # 2 workers over range(16) in batches of 4, three batches returned: worker 0 consumed 8
    # positions of its slice, worker 1 four.
    r = whole.after([8, 4], 2, 16)
    assert r == Remaining((9, 11, 13), 15)
    assert r.positions(np.arange(r.size(16))).tolist() == [9, 11, 13, 15]
    # Composes: 3 workers over that order, worker 0 took two, worker 2 one: 9, 15 and 13.
    assert r.after([2, 0, 1], 3, 16) == Remaining((11,), 16)
    assert whole.after([5], 1, 16) == Remaining((), 5)  # a prefix
    assert whole.after([0, 0], 2, 16) is whole
    assert whole.after([8, 8], 2, 16) == Remaining((), 16)  # all read


def _round_robin_counts(size, workers, batch, batches):
    """How many positions of its slice each of ``workers`` workers (batching its slice of ``size``
    positions by ``batch``) had returned after the consumer took ``batches`` batches in turn."""
    left = [len(range(w, size, workers)) for w in range(workers)]
    counts = [0] * workers
    w = 0
    for _ in range(batches):
        live = [v for v in range(workers) if left[(w + v) % workers]]
        if not live:
            break
        w = (w + live[0]) % workers
        take = min(batch, left[w])
        counts[w] += take
        left[w] -= take
        w = (w + 1) % workers
    return counts


def test_remaining_after_chains_of_restores_matches_a_brute_force_replay():
    """Random worker counts, batch sizes and stopping points, restored one after another: the
    positions left are always exactly those no worker returned, in stream order."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 120))
        remaining, left = Remaining(), list(range(n))
        for _ in range(int(rng.integers(1, 5))):
            size = remaining.size(n)
            assert remaining.positions(np.arange(size)).tolist() == left
            workers, batch = int(rng.integers(1, 5)), int(rng.integers(1, 9))
            counts = _round_robin_counts(size, workers, batch, int(rng.integers(0, 12)))
            taken = {w + workers * j for w in range(workers) for j in range(counts[w])}
            left = [p for i, p in enumerate(left) if i not in taken]
            remaining = remaining.after(counts, workers, n)
        assert remaining.positions(np.arange(remaining.size(n))).tolist() == left
        assert list(remaining.holes) == sorted(set(remaining.holes))
