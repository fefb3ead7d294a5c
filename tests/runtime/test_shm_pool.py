"""Pooled shared-memory segments: reuse, copy-out semantics, growth and clean-up."""

from __future__ import annotations

import os

import numpy as np
import pytest
from runtime_helpers import our_segments

import grain_core as grain
from grain_core.runtime import shm

pytestmark = pytest.mark.timeout(60)


def _message(writer, values, size):
    for v in values:
        writer.add({"a": np.full((size,), v, dtype=np.int64), "v": v})
    return writer.finish()


def test_writer_reuses_a_released_segment_and_copies_never_alias_it():
    prefix = shm.new_shm_prefix()
    writer, reader = shm.MessageWriter(prefix), shm.MessageReader()
    try:
        first = _message(writer, [1, 2], 1000)
        out1 = reader.read(*first)
        writer.release_oldest()
        second = _message(writer, [3, 4], 1000)
        assert second[0] == first[0]  # the same segment, rewritten
        out2 = reader.read(*second)
        # The first message's arrays are the consumer's own: rewriting the segment left them alone.
        assert [int(e["a"][0]) for e in out1 + out2] == [1, 2, 3, 4]
        assert all((e["a"] == e["v"]).all() and e["a"].flags.writeable for e in out1 + out2)
        out1[0]["a"][:] = -1  # writable, and writing does not touch shared memory
        assert [int(e["a"][0]) for e in reader.read(*second)] == [3, 4]
        # An unreleased message keeps its segment: a new one is made for the next message.
        third = _message(writer, [5], 1000)
        assert third[0] != second[0]
        # The reader unlinks a segment's name once it has opened it: only the unread one is listed.
        assert our_segments() == [third[0]]
        writer.release_all()
        assert _message(writer, [6], 1000)[0] in (second[0], third[0])
    finally:
        writer.close()
        reader.close()
    assert our_segments() == []
    assert shm.sweep_shm(prefix) == 0


def test_segments_grow_and_shrink_and_the_reader_follows():
    prefix = shm.new_shm_prefix()
    writer, reader = shm.MessageWriter(prefix), shm.MessageReader()
    try:
        for size in (200, 300_000, 2_000_000, 200, 1_500_000, 300):
            msg = _message(writer, [size % 7, size % 11], size)
            out = reader.read(*msg)
            writer.release_all()
            assert [int(e["a"][-1]) for e in out] == [size % 7, size % 11]
            assert all(e["a"].shape == (size,) for e in out)
        assert [n for n in os.listdir("/dev/shm") if n.startswith(prefix)] == []  # all read
        (seg,) = writer._free
        assert os.fstat(seg.fd).st_size < (8 << 20)  # shrunk after the 16 MB message
    finally:
        writer.close()
        reader.close()
    assert our_segments() == []


def test_small_elements_need_no_segment():
    prefix = shm.new_shm_prefix()
    writer, reader = shm.MessageWriter(prefix), shm.MessageReader()
    try:
        writer.add({"x": np.arange(3)})
        msg = writer.finish()
        assert msg[0] is None
        assert reader.read(*msg)[0]["x"].tolist() == [0, 1, 2]
        writer.release_oldest()
    finally:
        writer.close()
        reader.close()
    assert our_segments() == []


def test_many_messages_use_a_bounded_pool_and_restores_stay_correct():
    ds = (
        grain.MapDataset.range(3000)
        .map(lambda x: np.full((600,), x))
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=1))
    )
    kept = []
    with iter(ds) as it:
        for n, a in enumerate(it):
            kept.append(a)
            if n % 200 == 0:
                # per_worker_buffer_size + 1 messages in flight, so at most 2 segments per worker
                # (+1 while a worker swaps one for a larger one).
                assert len(our_segments()) <= 2 * 3
            if n == 1000:
                state = it.get_state()
                for _ in range(50):  # leave messages of this generation in flight
                    kept.append(next(it))
                it.set_state(state)
        assert len(our_segments()) <= 2 * 3
    assert our_segments() == []
    values = [int(a[0]) for a in kept]
    assert values == list(range(1051)) + list(range(1001, 3000))
    assert all((a == a[0]).all() for a in kept)  # no array was overwritten by a later message


def test_a_read_interrupted_after_the_unlink_can_be_read_again(monkeypatch):
    """A message interrupted while read is read again (the runtimes re-deliver it): an interrupt
    right after the reader unlinked the segment's name must not lose the segment."""
    prefix = shm.new_shm_prefix()
    writer, reader = shm.MessageWriter(prefix), shm.MessageReader()
    real_discard = shm.discard

    def discard_then_interrupt(name):
        real_discard(name)
        monkeypatch.setattr(shm, "discard", real_discard)
        raise KeyboardInterrupt

    try:
        msg = _message(writer, [7, 8], 1000)
        monkeypatch.setattr(shm, "discard", discard_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            reader.read(*msg)
        assert our_segments() == []  # the name is gone ...
        out = reader.read(*msg)  # ... and the message still reads
        assert [int(e["a"][0]) for e in out] == [7, 8]
    finally:
        writer.close()
        reader.close()
    assert our_segments() == []
