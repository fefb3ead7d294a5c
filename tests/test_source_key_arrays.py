"""``MapDataset.source`` hands keys as one int64 array to a source that declares
``getitems_takes_arrays`` and as a list of Python ints to any other (issue 32)."""

from __future__ import annotations

import numpy as np

import grain_core as grain


class _Recording:
    """A source recording the type of the keys each ``__getitems__`` call gets."""

    def __init__(self, n: int):
        self._n = n
        self.calls: list[type] = []

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: int) -> int:
        return int(index) * 10

    def __getitems__(self, keys):
        self.calls.append(type(keys))
        return [int(k) * 10 for k in keys]


class _TakesArrays(_Recording):
    getitems_takes_arrays = True


def _read(source, *, shuffled: bool):
    ds = grain.MapDataset.source(source)
    if shuffled:
        ds = ds.shuffle(seed=3)
    return list(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))


def test_a_source_that_declares_it_gets_int64_arrays_and_the_same_elements():
    for shuffled in (False, True):
        plain, arrays = _Recording(50), _TakesArrays(50)
        assert _read(arrays, shuffled=shuffled) == _read(plain, shuffled=shuffled)
        assert arrays.calls and set(arrays.calls) == {np.ndarray}
        assert plain.calls and set(plain.calls) == {list}


def test_keys_past_the_end_wrap_before_the_source_sees_them():
    src = _TakesArrays(7)
    ds = grain.MapDataset.source(src)
    assert ds.__getitems__([3, 9, 15]) == [30, 20, 10]
    assert src.calls == [np.ndarray]


def test_a_worker_slice_reads_through_lists_again():
    src = _TakesArrays(10)
    ds = grain.MapDataset.source(src)
    ds.set_slice(slice(1, None, 2), sequential_slice=True)  # worker 1 of 2: records 5..9
    assert ds.__getitems__(range(0, 3)) == [50, 60, 70]
    assert src.calls == [list]


def test_range_data_source_declares_it():
    assert grain.sources.RangeDataSource(0, 4, 1).getitems_takes_arrays is True
    ds = grain.MapDataset.source(grain.sources.RangeDataSource(2, 20, 3))
    assert ds.__getitems__(np.array([0, 5, 6])) == [2, 17, 2]


def _load(source):
    sampler = grain.samplers.IndexSampler(
        num_records=len(source), shuffle=True, seed=1, num_epochs=1,
        shard_options=grain.sharding.NoSharding(),
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[grain.transforms.Batch(4)],
        worker_count=0,
        read_options=grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
    )
    return [b.tolist() for b in loader]


def test_the_data_loader_hands_arrays_to_a_source_that_declares_it():
    plain, arrays = _Recording(30), _TakesArrays(30)
    assert _load(arrays) == _load(plain)
    assert arrays.calls and set(arrays.calls) == {np.ndarray}
    assert plain.calls and set(plain.calls) == {list}
