"""User-defined datasets and iterators written Grain-style work in kernel pipelines."""

import numpy as np

import grain_core as grain
from grain_core import testing


class TimesTen(grain.MapDataset):
    """A Grain-style MapDataset: implements __len__ and __getitem__."""

    def __init__(self, parent):
        super().__init__(parent)
        self._parent = parent

    def __len__(self):
        return len(self._parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        x = self._parent[index]
        return None if x is None else x * 10


class CountUp(grain.IterDataset):
    """A Grain-style IterDataset with its own checkpointable iterator."""

    def __init__(self, n):
        super().__init__()
        self._n = n

    def __iter__(self):
        return _CountUpIterator(self._n)


class _CountUpIterator(grain.DatasetIterator):
    def __init__(self, n):
        super().__init__()
        self._n, self._i = n, 0

    def __next__(self):
        if self._i >= self._n:
            raise StopIteration
        self._i += 1
        return self._i - 1

    def get_state(self):
        return {"i": self._i}

    def set_state(self, state):
        self._i = state["i"]


def test_grain_style_map_dataset_in_pipeline():
    ds = TimesTen(grain.MapDataset.range(10).filter(lambda x: x % 2 == 0)).shuffle(seed=1).batch(2)
    out = np.concatenate(list(ds)).tolist()
    assert sorted(out) == [0, 20, 40, 60, 80]
    assert TimesTen(grain.MapDataset.range(5))[1:3][0] == 10
    testing.assert_equal_output_after_checkpoint(ds)


def test_grain_style_iter_dataset_in_pipeline():
    ds = CountUp(20).map(lambda x: x + 1).filter(lambda x: x % 3).batch(3)
    assert np.concatenate(list(ds)).tolist() == [x for x in range(1, 21) if x % 3]
    testing.assert_equal_output_after_checkpoint(ds)
