import json

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing
from grain_core.state import StateMismatchError


def _it(r):
    return grain.MapDataset.source(list(r)).to_iter_dataset()


def _inter(ranges, **kw):
    return grain.experimental.InterleaveIterDataset([_it(r) for r in ranges], **kw)


CASES = [
    ([range(3), range(10, 14)], 2, [0, 10, 1, 11, 2, 12, 13]),
    (
        [range(3), range(10, 12), range(20, 24), range(30, 31)],
        2,
        [0, 10, 1, 11, 2, 20, 30, 21, 22, 23],
    ),
    ([range(0), range(10, 12), range(20, 24)], 2, [10, 20, 11, 21, 22, 23]),
    ([range(2), range(10, 15)], 3, [0, 10, 1, 11, 12, 13, 14]),
    # Orders observed with google's grain 0.2.18: an exhausted slot is refilled only when its turn
    # comes round again, not in the turn in which it ran out.
    ([range(3), range(10, 12), range(20, 24), range(30, 31)], 3, [0, 10, 20, 1, 11, 21, 2, 22, 30, 23]),
    (
        [range(3), range(10, 14), range(0), range(30, 32), range(40, 43), range(50, 52)],
        3,
        [0, 10, 1, 11, 30, 2, 12, 31, 13, 40, 50, 41, 51, 42],
    ),
    (
        [range(3), range(0), range(0), range(30, 35), range(40, 41), range(50, 51)],
        3,
        [0, 1, 30, 40, 2, 31, 32, 50, 33, 34],
    ),
    (
        [range(4), range(10, 13), range(20, 23), range(30, 34), range(40, 42)],
        2,
        [0, 10, 1, 11, 2, 12, 3, 20, 30, 21, 31, 22, 32, 33, 40, 41],
    ),
    ([range(1), range(10, 11), range(20, 21)], 5, [0, 10, 20]),
]


@pytest.mark.parametrize("ranges,cycle,expected", CASES)
@pytest.mark.parametrize("threads", [{}, {"num_make_iter_threads": 2, "iter_buffer_size": 3}])
def test_grain_order(ranges, cycle, expected, threads):
    assert list(_inter(ranges, cycle_length=cycle, **threads)) == expected


class _File(grain.IterDataset):
    def __init__(self, name):
        super().__init__()
        self._name = name

    def __iter__(self):
        n = int(self._name[1:])
        return iter(
            grain.MapDataset.source([f"{self._name}:{i}" for i in range(n)]).to_iter_dataset()
        )


def test_map_dataset_of_iter_datasets():
    ds = grain.MapDataset.source(["f2", "f3", "f1"]).map(_File)
    out = list(grain.experimental.InterleaveIterDataset(ds, cycle_length=2))
    assert out == ["f2:0", "f3:0", "f2:1", "f3:1", "f3:2", "f1:0"]


@pytest.mark.parametrize("threads", [{}, {"num_make_iter_threads": 1, "iter_buffer_size": 2}])
def test_checkpoints(threads):
    ranges = [range(i * 10, i * 10 + (i % 4) + 1) for i in range(9)]
    ds = _inter(ranges, cycle_length=3, **threads)
    testing.assert_equal_output_after_checkpoint(ds, checkpoints=range(40))
    testing.check_deterministic(lambda: _inter(ranges, cycle_length=3, **threads))


def test_state_shape_and_foreign_state():
    it = iter(_inter([range(3), range(10, 14)], cycle_length=2))
    next(it)
    state = json.loads(json.dumps(it.get_state()))
    assert state["next_dataset"] == 1 and state["turn"] == 1
    assert state["open"][0]["dataset"] == 0 and state["open"][1] is None
    with pytest.raises(StateMismatchError):
        iter(_inter([range(3), range(10, 14)], cycle_length=3)).set_state(state)
    with pytest.raises(StateMismatchError):
        iter(_inter([range(3)], cycle_length=2)).set_state(state)


def test_bad_inputs():
    with pytest.raises(ValueError):
        _inter([range(3)], cycle_length=0)
    with pytest.raises(TypeError):
        grain.experimental.InterleaveIterDataset(_it(range(3)), cycle_length=1)
    with pytest.raises(TypeError):
        grain.experimental.InterleaveIterDataset([1, 2], cycle_length=1)
    with pytest.raises(ValueError):
        _inter([range(3)], cycle_length=1, iter_buffer_size=-1)


def test_close_with_threads():
    it = iter(
        _inter(
            [range(100), range(100)], cycle_length=2, iter_buffer_size=4, num_make_iter_threads=1
        )
    )
    next(it)
    it.close()


def _reader_threads():
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("interleave")]


def _wait_no_threads(timeout=30.0):  # a hang guard for a loaded machine, not a speed check
    import time

    deadline = time.monotonic() + timeout
    while _reader_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    return _reader_threads()


def test_threads_stop_on_close_and_on_garbage_collection():
    import gc

    assert _wait_no_threads() == []
    kw = dict(cycle_length=2, iter_buffer_size=4, num_make_iter_threads=1)
    it = iter(_inter([range(100), range(100), range(100)], **kw))
    next(it), next(it)
    assert _reader_threads()
    it.close()
    assert _reader_threads() == []
    it = iter(_inter([range(100), range(100), range(100)], **kw))
    next(it), next(it), next(it)
    assert _reader_threads()
    del it
    gc.collect()
    assert _wait_no_threads() == []
    # a restored iterator drops the old slots' threads
    it = iter(_inter([range(100), range(100)], **kw))
    state = it.get_state()
    for _ in range(10):
        next(it)
    it.set_state(state)
    next(it)
    assert len([t for t in _reader_threads() if t.name == "interleave-reader"]) == 1
    it.close()
    assert _reader_threads() == []


@pytest.mark.parametrize("element", [np.arange(3), ("error", 1), (1, 2)])
def test_background_reading_passes_any_element_through(element):
    ds = grain.experimental.InterleaveIterDataset(
        [grain.MapDataset.source([element] * 3).to_iter_dataset() for _ in range(2)],
        cycle_length=2,
        iter_buffer_size=2,
    )
    out = list(ds)
    assert len(out) == 6
    for x in out:
        np.testing.assert_array_equal(np.asarray(x, dtype=object), np.asarray(element, dtype=object))


def test_background_reading_keeps_the_order_and_errors():
    rng = np.random.default_rng(0)
    for _ in range(20):
        ranges = [range(10 * i, 10 * i + int(n)) for i, n in enumerate(rng.integers(0, 6, 6))]
        cycle = int(rng.integers(1, 5))
        plain = list(_inter(ranges, cycle_length=cycle))
        threaded = list(
            _inter(ranges, cycle_length=cycle, iter_buffer_size=2, num_make_iter_threads=2)
        )
        assert threaded == plain

    def boom(x):
        if x == 12:
            raise KeyError("bad element")
        return x

    bad = [grain.MapDataset.source(list(range(10, 15))).map(boom).to_iter_dataset()]
    ds = grain.experimental.InterleaveIterDataset([_it(range(5)), *bad], cycle_length=2, iter_buffer_size=2)
    it = iter(ds)
    with pytest.raises(KeyError, match="bad element"):
        list(it)
    it.close()
    assert _wait_no_threads() == []


def test_altered_states_are_refused():
    it = iter(_inter([range(3), range(10, 14)], cycle_length=2))
    next(it)
    state = json.loads(json.dumps(it.get_state()))
    for key, value in [("turn", 2), ("turn", -1), ("next_dataset", 3), ("open", [None])]:
        bad = dict(state, **{key: value})
        with pytest.raises(StateMismatchError):
            iter(_inter([range(3), range(10, 14)], cycle_length=2)).set_state(bad)
    bad = dict(state, open=[{"dataset": 1, "state": state["open"][0]["state"]}, None])
    with pytest.raises(StateMismatchError, match="next_dataset"):
        iter(_inter([range(3), range(10, 14)], cycle_length=2)).set_state(bad)


def test_cli_lists_the_plugin_with_its_version():
    from grain_core import testing as kit

    kit.check_plugin_listed("interleave", "grain-plugin-interleave", ["InterleaveIterDataset"])


def test_mp_prefetch_workers_split_the_datasets():
    import grain_core as grain

    datasets = grain.MapDataset.source([list(range(10 * d, 10 * d + 3)) for d in range(5)]).map(
        lambda xs: grain.MapDataset.source(xs).to_iter_dataset()
    )
    ds = grain.experimental.InterleaveIterDataset(datasets, cycle_length=2)
    expected = sorted(list(ds))
    mp = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    with iter(mp) as it:
        got = list(it)
    assert sorted(got) == expected  # every element once: each worker read its own datasets
    from grain_core import testing as kit

    kit.assert_equal_output_after_checkpoint(mp, checkpoints=range(0, 15, 2))
