"""A source that declares ``bulk_read_size`` (a remote reader, whose call costs a round trip
whatever its size) gets calls of at least that many indices from ``to_iter_dataset``, with default
``ReadOptions`` and without threads, and the same elements, order and state as any source
(``grain_core.dataset.bulk_reads``). Nothing here depends on timing: the floor is not measured.

Before, calls were sized by measuring chunk times alone: with threads they stopped at the buffer
(500, or one thread's share of it, 31), without threads they wandered down whenever a doubling
looked no cheaper on a loaded machine."""

from __future__ import annotations

import threading

import pytest

import grain_core as grain
from grain_core.dataset import bulk_reads, chunk_sizes
from grain_core.dataset.chunking import CHUNK_BYTES

pytestmark = pytest.mark.timeout(300)

N = 10_000
BULK = 1024


class BulkSource:
    """Records the size of every ``__getitems__`` call; ``bulk_read_size`` as given."""

    def __init__(self, n: int, bulk: int = BULK, payload: int = 0):
        self._n, self.bulk_read_size, self._payload = n, bulk, payload
        self.sizes: list[int] = []
        self._lock = threading.Lock()

    def __len__(self):
        return self._n

    def _one(self, i: int):
        return (int(i), b"x" * self._payload) if self._payload else int(i)

    def __getitem__(self, i):
        return self._one(i)

    def __getitems__(self, indices):
        out = [self._one(i) for i in indices]
        with self._lock:
            self.sizes.append(len(out))
        return out


OPTIONS = {
    "default": grain.ReadOptions(),
    "no threads": grain.ReadOptions(num_threads=0, prefetch_buffer_size=0),
    "threads, no buffer": grain.ReadOptions(num_threads=4, prefetch_buffer_size=0),
    "small buffer": grain.ReadOptions(num_threads=2, prefetch_buffer_size=8),
}


def _pipeline(src, options):
    return grain.MapDataset.source(src).seed(7).shuffle().map(lambda x: x).to_iter_dataset(options)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_calls_hold_at_least_the_declared_size_and_output_is_unchanged(name):
    src = BulkSource(N)
    got = list(_pipeline(src, OPTIONS[name]))
    assert got == list(_pipeline(BulkSource(N, bulk=0), OPTIONS[name]))
    # The first call stays small (the first element after one round trip; it also tells the
    # element's size); every later call but the last (the rest of the epoch) has the floor.
    middle = src.sizes[1:-1]
    assert middle and min(middle) >= BULK, src.sizes
    assert sum(src.sizes) == N


def test_with_threads_calls_reach_the_floor_even_above_the_buffer():
    src = BulkSource(N)
    list(_pipeline(src, grain.ReadOptions()))  # buffer 500 < 1024
    assert max(src.sizes) == BULK, src.sizes
    assert len(src.sizes) <= 2 + N // BULK


def test_with_threads_a_floor_above_the_chunk_cap_raises_it():
    """A declared size above the threaded chunk cap (``_MAX_CHUNK``, 1,024) is what the calls get
    with threads too (a remote reader's call of 4,096 indices costs about one of 1,024)."""
    big = 4 * chunk_sizes._MAX_CHUNK
    src = BulkSource(N, bulk=big)
    got = list(_pipeline(src, grain.ReadOptions()))
    assert got == list(_pipeline(BulkSource(N, bulk=0), grain.ReadOptions()))
    assert max(src.sizes) == big, src.sizes
    assert len(src.sizes) <= 2 + N // big


def test_the_floor_counts_source_indices_not_batches():
    """Under ``batch(16)`` an element reads 16 source indices: the floor is the declared size over
    16 elements, so calls stay near the declaration (before, it was 16 times as many indices)."""
    for options in (grain.ReadOptions(), grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)):
        src = BulkSource(N)
        ds = grain.MapDataset.source(src).seed(7).shuffle().batch(16).to_iter_dataset(options)
        it = iter(ds)
        for _ in range(3):
            next(it)
        assert it._sizes.floor == BULK // 16
        it.close()


class PairingSource(BulkSource):
    """Each call waits (at most ``WAIT_S``) until another call is in flight too, and records the
    most calls in flight at once: reads that overlap find a partner at once."""

    WAIT_S = 0.5

    def __init__(self, n: int):
        super().__init__(n)
        self.active = self.most = 0
        self._cond = threading.Condition()

    def __getitems__(self, indices):
        with self._cond:
            self.active += 1
            self.most = max(self.most, self.active)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self.active > 1, timeout=self.WAIT_S)
        try:
            return super().__getitems__(indices)
        finally:
            with self._cond:
                self.active -= 1


def test_with_threads_two_bulk_calls_are_in_flight_while_one_is_consumed():
    """Reading ahead, the pool holds the chunk being consumed and two more calls: one call's round
    trip overlaps another's work. (Before, it held one call beside the consumed chunk: a fast
    consumer then waited for every round trip in turn; here every call would wait alone.)"""
    from test_read_policy import SCRIPTS, _scripted

    src = PairingSource(12 * BULK)
    it = iter(_pipeline(src, grain.ReadOptions()))
    _scripted(it, SCRIPTS["ahead"])
    assert sorted(it) == list(range(12 * BULK))
    assert src.most >= 2, src.sizes
    assert max(src.sizes) <= BULK


@pytest.mark.parametrize("name", ["default", "no threads"])
def test_restore_continues_exactly(name):
    options = OPTIONS[name]
    reference = list(_pipeline(BulkSource(N, bulk=0), options))
    it = iter(_pipeline(BulkSource(N), options))
    head = [next(it) for _ in range(1500)]
    state = it.get_state()
    fresh = iter(_pipeline(BulkSource(N), options))
    fresh.set_state(state)
    assert head + list(fresh) == reference


def test_the_floor_keeps_chunks_within_chunk_bytes():
    payload = 64 << 10  # 64 KiB elements: 1,024 of them would be 64 MiB
    src = BulkSource(600, payload=payload)
    got = [x[0] for x in _pipeline(src, grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))]
    assert sorted(got) == list(range(600))
    cap = CHUNK_BYTES // payload
    assert max(src.sizes[1:]) <= cap + 1, src.sizes  # + 1: the element's own overhead rounding
    assert min(src.sizes[1:-1]) >= cap // 2, src.sizes


def test_the_declaration_is_found_through_stages():
    plain = grain.MapDataset.source(list(range(10)))
    bulk = grain.MapDataset.source(BulkSource(10, bulk=300))
    assert bulk_reads.declared_bulk_size(plain) == 0
    assert bulk_reads.declared_bulk_size(bulk.map(lambda x: x).slice(slice(1, None))) == 300
    mixed = grain.MapDataset.mix([plain, bulk])
    assert bulk_reads.declared_bulk_size(mixed) == 300
    odd = BulkSource(10)
    odd.bulk_read_size = "many"  # not an int: ignored
    assert bulk_reads.declared_bulk_size(grain.MapDataset.source(odd)) == 0


def test_bulk_floor():
    assert bulk_reads.bulk_floor(0, 100, 1024) == 0
    assert bulk_reads.bulk_floor(1024, 0, 1024) == 0  # element size not known yet
    assert bulk_reads.bulk_floor(4096, 100, 1024) == 1024
    assert bulk_reads.bulk_floor(1024, CHUNK_BYTES, 1024) == 1
    assert bulk_reads.bulk_floor(512, 1, 16384) == 512
