"""Lent messages: the consumer's arrays view a worker's segment, which goes back to the worker only
when every one of them is gone (grain_core.runtime.shm, ``MessageReader.read(..., release)``)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from runtime_helpers import our_segments

import grain_core as grain
from grain_core.runtime import shm

pytestmark = pytest.mark.timeout(120)

BIG = shm.LEND_MIN_BYTES // 8  # int64 values: one array spans LEND_MIN_BYTES


def _message(writer, values, size=BIG):
    for v in values:
        writer.add({"a": np.full((size,), v, dtype=np.int64), "v": v})
    number = writer.messages
    return number, writer.finish()


def _in_segment(array, reader, name) -> bool:
    mapping = reader._maps[name][2]
    start = mapping.ctypes.data
    return start <= array.ctypes.data < start + mapping.nbytes


def test_a_lent_message_is_released_once_its_last_array_is_gone():
    prefix = shm.new_shm_prefix()
    writer, reader = shm.MessageWriter(prefix), shm.MessageReader(lend_bytes=64 << 20)
    released: list[int] = []
    try:
        number, msg = _message(writer, [1, 2])
        out = reader.read(*msg, release=lambda: released.append(number))
        assert all(_in_segment(e["a"], reader, msg[0]) for e in out)  # views, not copies
        assert [int(e["a"][0]) for e in out] == [1, 2] and reader.lent >= 2 * BIG * 8
        assert all(e["a"].flags.writeable for e in out)
        out[0]["a"][:4] = -1  # the user's to write while lent
        kept = out[1]["a"][10:20].reshape(2, 5)  # a view of a view keeps the message lent
        del out
        gc.collect()
        assert released == []
        # Not released: the writer puts its next message in another segment.
        _, second = _message(writer, [3])
        assert second[0] != msg[0]
        assert (kept == 2).all()
        del kept
        gc.collect()
        assert released == [number]
        writer.release(number)
        writer.release(second_number := number + 1)
        _, third = _message(writer, [4])
        assert third[0] in (msg[0], second[0])  # a released segment is reused
        writer.release(second_number + 1)
        writer.release(number)  # twice: nothing changes
    finally:
        writer.close()
        reader.close()
    assert our_segments() == []


def test_small_messages_and_messages_over_the_allowance_are_copied_and_released_at_once():
    prefix = shm.new_shm_prefix()
    writer = shm.MessageWriter(prefix)
    reader = shm.MessageReader(lend_bytes=3 * BIG * 8 // 2)  # room for one big message at a time
    released: list[int] = []
    try:
        n_small, small = _message(writer, [5], size=100)  # in band: no segment at all
        assert small[0] is None
        reader.read(*small, release=lambda: released.append(n_small))
        assert released == [n_small]
        n_small_seg, small_seg = _message(writer, [6], size=BIG // 4)  # a segment, under the minimum
        out = reader.read(*small_seg, release=lambda: released.append(n_small_seg))
        assert released == [n_small, n_small_seg] and not _in_segment(out[0]["a"], reader, small_seg[0])
        n_lent, lent = _message(writer, [7])
        kept = reader.read(*lent, release=lambda: released.append(n_lent))
        assert _in_segment(kept[0]["a"], reader, lent[0]) and n_lent not in released
        n_over, over = _message(writer, [8])  # would pass the allowance: copied
        out = reader.read(*over, release=lambda: released.append(n_over))
        assert n_over in released and not _in_segment(out[0]["a"], reader, over[0])
        assert int(out[0]["a"][-1]) == 8
        del kept
        gc.collect()
        assert n_lent in released
        n_again, again = _message(writer, [9])  # the allowance is back: lent again
        out = reader.read(*again, release=lambda: released.append(n_again))
        assert _in_segment(out[0]["a"], reader, again[0]) and n_again not in released
        del out
        gc.collect()
        assert n_again in released
    finally:
        writer.close()
        reader.close()
    assert our_segments() == []


def test_lent_arrays_outlive_the_reader_and_the_writer():
    prefix = shm.new_shm_prefix()
    writer, reader = shm.MessageWriter(prefix), shm.MessageReader(lend_bytes=64 << 20)
    _, msg = _message(writer, [11, 12])
    out = reader.read(*msg, release=lambda: None)
    writer.close()
    reader.close()
    assert our_segments() == []
    assert [int(e["a"].sum()) for e in out] == [11 * BIG, 12 * BIG]  # still mapped, still whole


def test_arrays_held_by_the_user_are_never_overwritten_and_segments_come_back(monkeypatch):
    """Through ``mp_prefetch``: 80 elements of 256 KiB are kept, past the reader's lending
    allowance (made small here, so later messages are copied), and each keeps its value; the
    elements after them are dropped at once, and their segments go back to the workers: the
    workers reuse a few segments rather than making one per message."""
    monkeypatch.setattr(shm, "LEND_BYTES", 4 << 20)
    names: list[str | None] = []
    lent = 0
    real_read = shm.MessageReader.read

    def read(self, name, payloads, layouts, release=None):
        nonlocal lent
        names.append(name)
        before = self.lent
        out = real_read(self, name, payloads, layouts, release)
        lent += self.lent > before
        return out

    monkeypatch.setattr(shm.MessageReader, "read", read)
    ds = (
        grain.MapDataset.range(400)
        .map(lambda x: np.full((32 * 1024,), x, dtype=np.int64))
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    with iter(ds) as it:
        kept = [next(it) for _ in range(80)]
        rest = [int(a[0]) for a in it]
    assert [int(a[0]) for a in kept] + rest == list(range(400))
    assert all((a == a[0]).all() for a in kept)  # nothing was written under a kept array
    assert lent > 0 and len(names) > 50, (lent, len(names))
    # Without releases every message takes a segment of its own (~60 here).
    assert len(set(names)) <= 24, sorted(set(names))  # segments were released and reused
    assert our_segments() == []
