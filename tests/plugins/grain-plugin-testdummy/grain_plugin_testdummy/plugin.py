"""Hook implementations of the test-only plugin."""

import grain_core as grain
from grain_core import state
from grain_core.plugins import hookimpl


class SquaresSource:
    """Random-access source of ``i * i`` for ``i < n``."""

    def __init__(self, n: int):
        self._n = n

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        if not 0 <= i < self._n:
            raise IndexError(f"index {i} out of range for length {self._n}")
        return i * i

    def __repr__(self):
        return f"SquaresSource({self._n})"


class RepeatEachIterDataset(grain.IterDataset):
    """Yields every parent element ``times`` times."""

    def __init__(self, parent, times: int = 2):
        super().__init__(parent)
        self._times = times

    def __iter__(self):
        return _RepeatEachIterator(iter(self.parents[0]), self._times)


class _RepeatEachIterator(grain.DatasetIterator):
    def __init__(self, parent, times):
        super().__init__(parent)
        self._times, self._left, self._x = times, 0, None
        self._before = parent.get_state()

    def __next__(self):
        if not self._left:
            self._before = self.parents[0].get_state()
            self._x, self._left = next(self.parents[0]), self._times
        self._left -= 1
        return self._x

    def get_state(self):
        return state.make_state("RepeatEach", parent=self._before, left=self._left)

    def set_state(self, s):
        state.expect_state(s, "RepeatEach", ("parent", "left"))
        self.parents[0].set_state(s["parent"])
        self._before, self._left = s["parent"], 0
        if s["left"]:
            self._x = next(self.parents[0])
            self._left = s["left"]


def squares(n: int) -> grain.MapDataset:
    return grain.MapDataset.source(SquaresSource(n))


@hookimpl
def register_sources(register):
    register(SquaresSource)


@hookimpl
def register_transforms(register):
    register(RepeatEachIterDataset)


@hookimpl
def register_dataset_factories(register):
    register(squares, on="MapDataset")
