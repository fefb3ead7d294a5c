"""``IterDataset.mix`` accepts ``MapDataset`` inputs as Grain 0.2.18 does (it iterates them, i.e.
reads them through ``to_iter_dataset()``). Expected outputs recorded from google grain 0.2.18::

    mix([range(5), range(10, 15).to_iter_dataset()], [1, 1]) -> 0 10 1 11 | 2 12 3 13 4 14
    mix([range(5).shuffle(seed=3), range(10, 15)])           -> 4 10 3 11 0 12 1 13 2 14
"""

import grain_core as grain


def test_map_dataset_inputs_are_read_as_iterators():
    m = grain.IterDataset.mix(
        [grain.MapDataset.range(5), grain.MapDataset.range(10, 15).to_iter_dataset()], [1, 1]
    )
    it = iter(m)
    assert [next(it) for _ in range(4)] == [0, 10, 1, 11]
    state = it.get_state()
    assert list(it) == [2, 12, 3, 13, 4, 14]
    again = iter(m)
    again.set_state(state)
    assert list(again) == [2, 12, 3, 13, 4, 14]


def test_map_dataset_inputs_keep_their_shuffle():
    m = grain.IterDataset.mix(
        [grain.MapDataset.range(5).shuffle(seed=3), grain.MapDataset.range(10, 15)]
    )
    assert list(m) == [4, 10, 3, 11, 0, 12, 1, 13, 2, 14]
    assert grain.experimental.get_element_spec(m).shape == ()
