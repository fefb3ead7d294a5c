"""The conformance kit's stage checks for InterleaveIterDataset."""

import functools

import grain_core as grain
from grain_core import testing


def make(cycle_length=2, **kw):
    datasets = [grain.MapDataset.source(list(range(10 * d, 10 * d + 3 + d))).to_iter_dataset() for d in range(5)]
    return grain.experimental.InterleaveIterDataset(datasets, cycle_length=cycle_length, **kw)


def test_interleave_conforms():
    testing.check_stage(make, foreign=functools.partial(make, 3))


def test_interleave_with_reader_threads_conforms():
    testing.check_stage(
        functools.partial(make, iter_buffer_size=2, num_make_iter_threads=1), fresh_process=False
    )
