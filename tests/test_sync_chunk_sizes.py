"""How ``to_iter_dataset`` without threads sizes the chunks it reads when asked for
(``ChunkSizes.adapt_sync``, owned by the iterator), driven with modelled read times (no clock):
a CPU-bound map keeps its chunks short, so the caller never waits long for one element; a source
with a fixed cost per call (a reader's or a remote round trip's) gets its indices in bulk."""

from __future__ import annotations

import pytest

import grain_core as grain
from grain_core.dataset import chunk_sizes, prefetch


def _reader():
    options = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    it = iter(grain.MapDataset.range(10**7).to_iter_dataset(options))
    assert isinstance(it, prefetch.PrefetchDatasetIterator)
    return it


def _run(model, steps=300):
    it = _reader()
    sizes = []
    for _ in range(steps):
        n = it._sizes.sync_chunk
        sizes.append(n)
        it._sizes.adapt_sync(model(n), n)
    return sizes


@pytest.mark.parametrize("per_element", [1e-4, 1e-3, 1e-2])
def test_a_cpu_bound_map_keeps_chunks_short(per_element):
    sizes = _run(lambda n: per_element * n)
    # Trying a larger size stops once a chunk takes _SLOW_MIN_SECONDS; then chunks halve back.
    assert max(sizes) * per_element < 2 * chunk_sizes._SLOW_MIN_SECONDS
    assert sizes[-1] * per_element <= max(chunk_sizes._MAX_CHUNK_SECONDS, per_element)


@pytest.mark.parametrize("per_call", [2e-4, 0.02])
def test_a_fixed_cost_per_call_gets_indices_in_bulk(per_call):
    sizes = _run(lambda n: per_call + 1e-6 * n)
    assert sizes[-1] >= 4096
    assert max(sizes) <= prefetch._MAX_SYNC_CHUNK
