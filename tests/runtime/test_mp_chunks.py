"""The chunk protocol through ``mp_prefetch``: ``next_chunk`` hands out what the workers delivered,
in the round-robin order of ``next()``, with a state that restores exactly wherever it is taken,
for several per-worker buffer sizes; worker failures and exhaustion surface as with ``next()``."""

from __future__ import annotations

import numpy as np
import pytest

import grain_core as grain

pytestmark = pytest.mark.timeout(300)

N = 97  # not a multiple of any worker count used


def _pipeline(workers: int, buffer: int, *, big: bool = False, fail_at: int | None = None):
    ds = grain.MapDataset.range(N).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    )
    if big:  # arrays large enough to travel through shared memory
        ds = ds.map(lambda x: {"i": x, "a": np.full(3000, x, dtype=np.int64)})
    if fail_at is not None:
        ds = ds.map(_fail_at(fail_at))
    return ds.mp_prefetch(
        grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer)
    )


def _fail_at(index):
    def fn(x):
        if x == index:
            raise ValueError(f"element {index} is bad")
        return x

    return fn


def _key(x):
    return int(x["i"]) if isinstance(x, dict) else int(x)


def _read_chunks(it, sizes, limit):
    out, calls = [], 0
    while len(out) < limit:
        k = sizes[calls % len(sizes)]
        calls += 1
        try:
            chunk = it.next_chunk(min(k, limit - len(out)))
        except StopIteration:
            break
        assert 1 <= len(chunk) <= min(k, limit - len(out))
        out += chunk
    return out


@pytest.mark.parametrize(
    "workers,buffer,big", [(1, 1, False), (2, 3, True), (3, 16, False), (2, 64, False)]
)
def test_next_chunk_gives_next_order_and_states_restore_anywhere(workers, buffer, big):
    with iter(_pipeline(workers, buffer, big=big)) as it:
        reference = [_key(x) for x in it]
    assert sorted(reference) == list(range(N))
    sizes = [1, 7, 64, 2, 300]
    with iter(_pipeline(workers, buffer, big=big)) as it, iter(
        _pipeline(workers, buffer, big=big)
    ) as other:
        got: list[int] = []
        for stop in (0, 1, 5, 30, 31, 60, N):
            got += [_key(x) for x in _read_chunks(it, sizes, stop - len(got))]
            assert got == reference[: len(got)]
            # The state restores into another iterator, which continues exactly from here.
            other.set_state(it.get_state())
            rest = [_key(x) for x in _read_chunks(other, [5, 1, 40], N)]
            assert rest == reference[len(got) :], f"restored after {len(got)} elements"
        with pytest.raises(StopIteration):
            it.next_chunk(4)
        # next() and next_chunk() mix freely.
        it.set_state(_state_after(workers, buffer, big, 10))
        assert _key(next(it)) == reference[10]
        assert [_key(x) for x in _read_chunks(it, [3], 6)] == reference[11:17]
        if big:
            x = it.next_chunk(1)[0]
            assert x["a"].flags.writeable and x["a"][0] == x["i"]


def _state_after(workers, buffer, big, n):
    with iter(_pipeline(workers, buffer, big=big)) as it:
        for _ in range(n):
            next(it)
        return it.get_state()


@pytest.mark.parametrize("workers", [1, 2])
def test_next_chunk_delivers_the_elements_before_a_worker_failure(workers):
    with iter(_pipeline(workers, 8, fail_at=40)) as it:
        got = []
        with pytest.raises(ValueError, match="element 40 is bad"):
            while True:
                got += it.next_chunk(16)
    assert got == list(range(40))
