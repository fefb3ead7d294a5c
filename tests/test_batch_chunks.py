"""``MapDataset.batch`` read in chunks: every batch of a chunk is stacked in one loop
(``batching.stack_batches``), exactly as one batch at a time (``stack_batch``) stacks it, and
``to_iter_dataset`` without threads caps a chunk of batches by the source elements it reads
(``chunking.source_fan_in``)."""

from __future__ import annotations

import numpy as np
import pytest

import grain_core as grain
from grain_core.dataset import prefetch
from grain_core.dataset.batching import stack_batch, stack_batches
from grain_core.dataset.chunking import source_fan_in

_RUNS = [
    [1, 2, 3],
    [1.5, 2.0],
    [True, False],
    [1, 2.5],
    [2**63, 2**63 + 1],  # past int64: uint64
    [2**70, 1],  # past uint64: object
    [1, "a"],
    [np.int32(1), np.int32(2)],
    [{"a": 1}, {"a": 2}],
    ["x", "y"],
    [np.zeros(2), np.ones(2)],
]


def _same(a, b):
    assert type(a) is type(b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    else:
        assert a == b


@pytest.mark.parametrize("run", _RUNS, ids=repr)
def test_stack_batches_stacks_each_run_as_stack_batch_does(run):
    items = run + run[:1] + run
    sizes = [len(run), 1, len(run)]
    got = stack_batches(items, sizes, None)
    want = [stack_batch(run, None), stack_batch(run[:1], None), stack_batch(run, None)]
    assert len(got) == 3
    for g, w in zip(got, want):
        _same(g, w)


def test_stack_batches_calls_batch_fn_per_run():
    assert stack_batches([1, 2, 3, 4, 5], [2, 3], list) == [[1, 2], [3, 4, 5]]


def test_batches_drop_nones_as_before():
    ds = grain.MapDataset.range(10).filter(lambda x: x % 3 != 0).batch(4)
    assert [b.tolist() for b in ds] == [[1, 2], [4, 5, 7], [8]]  # 0, 3, 6 and 9 dropped
    assert [b.tolist() for b in grain.MapDataset.range(10).batch(4)] == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9]
    ]


def test_source_fan_in_is_the_product_of_batch_sizes_on_the_longest_path():
    base = grain.MapDataset.range(1000)
    assert source_fan_in(base) == 1
    assert source_fan_in(base.shuffle(seed=1).map(str).batch(4)) == 4
    assert source_fan_in(base.batch(4).batch(3).map(len)) == 12
    mixed = grain.MapDataset.mix([base.batch(8), base.batch(2)])
    assert source_fan_in(mixed) == 8


def test_a_synchronous_chunk_of_batches_reads_at_most_the_element_cap():
    options = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    ds = grain.MapDataset.range(10**6).batch(32)
    it = iter(ds.to_iter_dataset(options))
    assert isinstance(it, prefetch.PrefetchDatasetIterator)
    assert it._sizes.limit(False) == prefetch._MAX_SYNC_CHUNK // 32
    plain = iter(grain.MapDataset.range(10**6).to_iter_dataset(options))
    assert plain._sizes.limit(False) == prefetch._MAX_SYNC_CHUNK
    # Chunking changes how work is split, never the batches.
    assert [b.tolist() for b in it][:2] == [list(range(32)), list(range(32, 64))]
