"""``chunking.mix_chunk`` builds a chunk of a mix with whole-chunk steps (a repeated period,
counts, one extended slice per parent offset when the period is short): every path gives the
elements a position-by-position walk gives, and leaves each parent right after its share."""

from __future__ import annotations

import random

import pytest

import grain_core as grain
from grain_core.dataset.chunking import mix_chunk
from grain_core.dataset.mixing import MixSelection

_OPTIONS = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _parents(lengths):
    return [
        iter(grain.MapDataset.range(n).map(lambda x, d=d: (d, x)).to_iter_dataset(_OPTIONS))
        for d, n in enumerate(lengths)
    ]


def _walk(order, lengths, taken, pos, max_elements):
    """Position by position: the elements, and whether a parent ran out."""
    out = []
    for p in range(pos, pos + max_elements):
        d = order[p % len(order)]
        if taken[d] >= lengths[d]:
            return out, True
        out.append((d, taken[d]))
        taken[d] += 1
    return out, False


@pytest.mark.parametrize("seed", range(6))
def test_mix_chunk_gives_the_position_by_position_elements(seed):
    rng = random.Random(seed)
    for _ in range(40):
        k = rng.randint(1, 4)
        order = MixSelection([rng.randint(1, 5) for _ in range(k)]).order
        lengths = [rng.randint(0, 400) for _ in range(k)]
        parents, taken, pos = _parents(lengths), [0] * k, rng.randint(0, 30)
        for _ in range(8):
            m = rng.choice([1, 3, 16, 64, 256, 1000])
            want, ran_out = _walk(order, lengths, taken, pos, m)
            got = mix_chunk(parents, order, pos, m)
            assert got.elements == want
            assert got.count == len(want)
            assert ran_out or not got.exhausted  # (a parent that fell short is found at the next read)
            # each parent stands right after its share: its next element is the next taken one
            for d, it in enumerate(parents):
                state = it.get_state()
                nxt = next(it, None)
                assert nxt == ((d, taken[d]) if taken[d] < lengths[d] else None)
                it.set_state(state)
            pos += got.count
            if ran_out:
                break


def test_next_from_the_chunk_still_refuses_while_another_thread_is_inside():
    """``next()`` serves the mix's chunk before the guard only while no thread is inside: with
    another thread's ident in the owner slot it raises, even with elements waiting."""
    import threading

    from grain_core.dataset.concurrency import ConcurrentIteratorUseError

    it = iter(grain.IterDataset.mix([grain.MapDataset.range(50).to_iter_dataset(_OPTIONS)] * 2))
    got = [next(it) for _ in range(4)]  # reads grow 1, 2, 4, ...: elements are waiting now
    assert it._served < len(it._read)
    it._grain_owner = threading.get_ident() + 1  # as if another thread were inside
    with pytest.raises(ConcurrentIteratorUseError, match="is inside this iterator"):
        next(it)
    it._grain_owner = None
    rest = list(it)
    assert got + rest == [x for i in range(50) for x in (i, i)]


def test_reads_by_next_hold_about_chunk_bytes_of_large_elements():
    """A mix's ``next()`` reads up to ``_MAX_READ`` positions at a time, and about
    ``CHUNK_BYTES`` of elements once it has measured one: large elements are not read by the
    thousand."""
    import numpy as np

    from grain_core.dataset import mixing
    from grain_core.dataset.chunking import CHUNK_BYTES

    size = 1 << 20
    parents = [
        grain.MapDataset.range(200)
        .map(lambda x: np.full(size, x % 256, np.uint8))
        .to_iter_dataset(_OPTIONS)
        for _ in range(2)
    ]
    it = iter(grain.IterDataset.mix(parents, [0.5, 0.5]))
    most = 0
    for _ in range(400):
        next(it)
        most = max(most, len(it._read))
    assert most <= CHUNK_BYTES // size
    small = iter(grain.IterDataset.mix([grain.MapDataset.range(20_000).to_iter_dataset(_OPTIONS)] * 2))
    for _ in range(20_000):
        next(small)
    assert len(small._read) == mixing._MAX_READ  # small elements: whole reads
