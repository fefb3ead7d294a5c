import json

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
    assert out == ["f2:0", "f3:0", "f2:1", "f3:1", "f1:0", "f3:2"]


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
