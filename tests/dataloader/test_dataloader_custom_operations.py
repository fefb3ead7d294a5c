"""Custom legacy ``Operation``s in ``DataLoader(operations=[...])`` (Grain's ``Operation``
protocol: a callable over an iterator of ``Record``s). Their outputs against recorded Grain runs are
in ``tests/integration/compat_semantics`` (group ``legacy_operations``); here: order with other
operations, per-worker application, exact checkpoints and refusals."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

import grain_core.python as gp
from grain_core.state import StateMismatchError


class PairSum:
    """Sums consecutive pairs of records (a trailing odd record is dropped)."""

    def __call__(self, input_iterator):
        prev = None
        for r in input_iterator:
            if prev is None:
                prev = r
            else:
                yield gp.Record(r.metadata.remove_record_key(), prev.data + r.data)
                prev = None


class Tag(gp.Operation):
    """Pairs each element with its record's sampler index and record key (a subclass of Operation)."""

    def __call__(self, input_iterator):
        for r in input_iterator:
            yield gp.Record(r.metadata, (r.metadata.index, r.metadata.record_key, r.data))


class Twice(gp.MapTransform):
    def map(self, x):
        return x * 2


def _loader(n=10, ops=(), workers=0, **sampler):
    sampler.setdefault("num_epochs", 1)
    return gp.DataLoader(
        data_source=list(range(n)),
        sampler=gp.IndexSampler(n, gp.NoSharding(), **sampler),
        operations=list(ops),
        worker_count=workers,
    )


def test_operations_run_in_order_on_records():
    assert list(_loader(10, [PairSum()])) == [1, 5, 9, 13, 17]
    assert list(_loader(10, [Twice(), PairSum()])) == [2, 10, 18, 26, 34]
    batches = list(_loader(11, [Twice(), PairSum(), gp.Batch(2)]))
    assert [b.tolist() for b in batches] == [[2, 10], [18, 26], [34]]
    # The operation sees each record's sampler metadata.
    tagged = list(_loader(6, [Tag()], shuffle=True, seed=3))
    assert [t[0] for t in tagged] == list(range(6))
    assert sorted(t[2] for t in tagged) == list(range(6))
    assert all(t[1] == t[2] for t in tagged)


def test_a_generator_function_is_an_operation():
    def negate(records):
        for r in records:
            yield gp.Record(r.metadata, -r.data)

    assert list(_loader(4, [negate])) == [0, -1, -2, -3]
    assert list(_loader(4, [lambda records: records])) == [0, 1, 2, 3]  # identity


def test_each_worker_runs_the_operations_on_its_share():
    # 3 workers: worker w reads positions w, w+3, ...; pairs and batches within the worker.
    out = list(_loader(14, [Twice(), PairSum(), gp.Batch(2)], workers=3))
    assert [b.tolist() for b in out] == [[6, 30], [10, 34], [14, 38]]


@pytest.mark.parametrize("workers", [0, 2])
def test_checkpoints_restore_exactly(workers):
    loader = _loader(30, [Twice(), PairSum(), Tag()], workers=workers, shuffle=True, seed=5)
    full = list(loader)
    for k in (0, 1, 4, len(full) - 1, len(full)):
        it = iter(loader)
        head = [next(it) for _ in range(k)]
        state = it.get_state()
        json.loads(state)  # JSON bytes
        it2 = iter(loader)
        it2.set_state(state)
        assert head + list(it2) == full, k
        it.close()
        it2.close()


def _op_state(state):
    """The operation stage's state inside a pipeline state."""
    if state.get("kind") == "LegacyOperationIterDataset":
        return state
    for value in state.values():
        if isinstance(value, dict) and (found := _op_state(value)) is not None:
            return found
    return None


def test_a_state_of_another_operation_list_is_refused_and_changes_nothing():
    it = iter(_loader(10, [PairSum()]))
    next(it)
    state = json.loads(it.get_state())
    other = iter(_loader(10, [Tag()]))
    with pytest.raises(StateMismatchError):
        other.set_state(json.dumps(state).encode())
    assert next(other) == (0, 0, 0)
    # A replay that cannot reach the saved position (another operation behind the same name).
    _op_state(state["iterator"])["emitted"] = 99
    fresh = iter(_loader(10, [PairSum()]))
    with pytest.raises(StateMismatchError, match="yielded 99 records"):
        fresh.set_state(json.dumps(state).encode())
    assert next(fresh) == 1


def test_builtin_operations_run_as_operations_and_log_as_grain(caplog):
    ops = [gp.MapOperation(lambda x: x + 1), gp.FilterOperation(lambda x: x % 2), PairSum()]
    with caplog.at_level(logging.ERROR):
        assert list(_loader(9, ops)) == [4, 12]
    assert "deprecated PyGrain MapOperation" in caplog.text
    assert "deprecated PyGrain FilterOperation" in caplog.text


def test_non_callable_operation_is_refused():
    with pytest.raises(TypeError, match=r"operations\[0\] is a str.*legacy Operation"):
        _loader(4, ["batch"])


def test_random_map_reads_the_records_rng():
    class AddNoise(gp.RandomMapTransform):
        def random_map(self, x, rng):
            return x + float(rng.random())

    with_op = list(_loader(6, [AddNoise(), Tag()], shuffle=True, seed=2))
    without = list(_loader(6, [AddNoise()], shuffle=True, seed=2))
    np.testing.assert_array_equal([t[2] for t in with_op], without)
