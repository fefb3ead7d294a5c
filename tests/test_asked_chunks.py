"""``to_iter_dataset``'s ``next_chunk(n)`` serves the ``n`` elements asked for when the caller reads
the next chunk itself (without threads, or with threads while the read policy reads inline): the
unreturned rest of the current chunk goes in front of a chunk read for the elements still missing.
A stage reading ahead (a filter, a mix) then gets whole calls instead of a short rest at every chunk
end, whatever ``prefetch_buffer_size`` caps chunks at.

What is checked: the calls return what is asked for, in order; what is read stays within the
buffer of what was returned (so the bound on elements held is unchanged); ``unread`` moves back
over a call that spans two chunks; states taken anywhere restore exactly; a read that fails
serves the rest first and raises at the failing element; reading on demand or ahead is unchanged.
No check depends on timing (the policy is scripted).
"""

from __future__ import annotations

import pytest
from test_chunks import CountingSource
from test_read_policy import SCRIPTS, _scripted

import grain_core as grain

SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
BUFFER = 8
THREADED = grain.ReadOptions(num_threads=3, prefetch_buffer_size=BUFFER)


def _iter(src, options, script=None):
    it = iter(grain.MapDataset.source(src).to_iter_dataset(options))
    if script is not None:
        _scripted(it, SCRIPTS[script])
    return it


def _drain_chunks(it, ask, check=lambda got: None):
    got = []
    while True:
        try:
            chunk = it.next_chunk(ask)
        except StopIteration:
            return got
        got += chunk
        check(got)
        if len(got) < 500:  # until the end, every call but the last returns all it asked for
            assert len(chunk) == ask or len(got) == 500


@pytest.mark.parametrize("ask", [5, 20, 100])
def test_inline_calls_return_what_they_ask_for_within_the_buffer(ask):
    src = CountingSource(500)
    it = _iter(src, THREADED, "inline")

    def within_buffer(got):
        # read beyond what was returned: at most the buffer (the unreturned rest of a chunk)
        assert src.max_stop <= len(got) + BUFFER

    assert _drain_chunks(it, ask, within_buffer) == list(range(500))
    if ask > BUFFER:  # chunks larger than the buffer are read only for the elements asked for
        assert max(map(len, src.calls)) > BUFFER
    it.close()


@pytest.mark.parametrize("ask", [3, 50, 3000])
def test_without_threads_calls_return_what_they_ask_for(ask):
    src = CountingSource(500)
    it = _iter(src, SYNC)
    calls = []
    while True:
        try:
            calls.append(it.next_chunk(ask))
        except StopIteration:
            break
    assert sum(calls, []) == list(range(500))
    assert all(len(c) == min(ask, 500) for c in calls[:-1])


@pytest.mark.parametrize("script", ["on demand", "ahead"])
def test_reads_by_the_pool_keep_their_chunks(script):
    """Chunks the pool reads (on demand or ahead) stay within the buffer: a call may return
    fewer elements than asked for at a chunk's end, as before. (The first chunk of a start is
    read by the caller, for the elements asked for.)"""
    src = CountingSource(500)
    it = _iter(src, THREADED, script)
    got = []
    while True:
        try:
            got += it.next_chunk(20)
        except StopIteration:
            break
        assert src.max_stop <= len(got) + BUFFER
    assert got == list(range(500))
    assert len(src.calls[0]) == 20
    assert max(map(len, src.calls[1:])) <= BUFFER
    it.close()


@pytest.mark.parametrize("options,script", [(SYNC, None), (THREADED, "inline")], ids=["sync", "inline"])
def test_unread_and_states_across_a_chunk_end(options, script):
    src = CountingSource(500)
    it = _iter(src, options, script)
    got = []
    k = 0
    while len(got) < 500:
        ask = (7, 13, 30)[k % 3]
        k += 1
        try:
            chunk = it.next_chunk(ask)
        except StopIteration:
            break
        back = len(chunk) // 2
        it.unread(back)  # back over part of a call that may span two chunks
        kept = chunk[: len(chunk) - back]
        got += kept
        state = it.get_state()
        fresh = _iter(CountingSource(500), options, script)
        fresh.set_state(state)
        assert list(fresh) == list(range(len(got), 500))
        fresh.close()
        if back:
            assert it.next_chunk(back) == chunk[len(kept) :]
            got += chunk[len(kept) :]
    assert got == list(range(500))
    it.close()


def _fails_at(bad):
    def f(x):
        if x == bad:
            raise ValueError(f"bad element {x}")
        return x

    return f


@pytest.mark.parametrize("ask", [3, 7, 25])
@pytest.mark.parametrize("bad", [5, 37, 150])
@pytest.mark.parametrize("options,script", [(SYNC, None), (THREADED, "inline")], ids=["sync", "inline"])
def test_a_failing_read_serves_the_rest_first(options, script, bad, ask):
    ds = grain.MapDataset.range(200).map(_fails_at(bad)).to_iter_dataset(options)
    it = iter(ds)
    if script is not None:
        _scripted(it, SCRIPTS[script])
    got = []
    with pytest.raises(ValueError) as info:
        while True:
            got += it.next_chunk(ask)
    assert got == list(range(bad))
    assert any(f"index {bad} " in n for n in info.value.__notes__), info.value.__notes__
    assert it.get_state()["next_index"] == bad  # the failing element is not consumed (as before)
    it.close()


def test_nones_are_skipped_across_a_chunk_end():
    ds = grain.MapDataset.range(300).map(lambda x: None if x % 4 == 1 else x)
    it = iter(ds.to_iter_dataset(THREADED))
    _scripted(it, SCRIPTS["inline"])
    got = []
    while True:
        try:
            chunk = it.next_chunk(10)
        except StopIteration:
            break
        assert None not in chunk
        got += chunk
    assert got == [x for x in range(300) if x % 4 != 1]
    it.close()
