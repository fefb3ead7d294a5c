"""The process runtime's credit channel (grain_core.runtime.credits): whole records, in order,
even where the platform takes only part of a send, and the consumer's close seen as the end."""

from __future__ import annotations

import pytest

from grain_core.runtime.credits import (
    CreditReceiver,
    CreditRecord,
    CreditSender,
    credit_channel,
)
from grain_core.runtime.waiting import wait_readable


def _drain(receiver: CreditReceiver, sender: CreditSender, got: list) -> None:
    while True:
        if not wait_readable([receiver], 0.0):
            if sender.flush() and not wait_readable([receiver], 0.0):
                return
            continue
        got += receiver.read()


@pytest.fixture
def channel():
    """A fresh credit channel ``(receiver, sender)``, both ends closed after the test."""
    r, sender = credit_channel()
    receiver = CreditReceiver(r)
    try:
        yield receiver, sender
    finally:
        sender.close()
        receiver.close()


def test_records_arrive_whole_and_in_order_across_partial_sends(channel):
    receiver, sender = channel
    # One send far larger than the socket's buffer: the kernel takes part of it (a partial
    # send), cutting a record; the rest must go first and the framing hold.
    first = b"".join(CreditRecord(1, i).pack() for i in range(200_000))
    assert sender.write(first)
    assert sender.pending  # the platform took only part of it
    got: list[tuple[int, int]] = []
    # While part is pending, more records are queued behind it (never ahead of it).
    more = 0
    while sender.pending or more < 1000:
        if sender.write(CreditRecord(2, more).pack()):
            more += 1
        got += receiver.read()
    _drain(receiver, sender, got)
    assert got == [(1, i) for i in range(200_000)] + [(2, i) for i in range(more)]


def test_a_full_channel_refuses_a_record_whole(channel):
    receiver, sender = channel
    sent = 0
    while sender.write(CreditRecord(0, sent).pack()):
        sent += 1
        assert sent < 10_000_000, "the channel never filled"
    assert not sender.pending  # refused whole: nothing of it was sent
    got: list[tuple[int, int]] = []
    _drain(receiver, sender, got)
    assert got == [(0, i) for i in range(sent)]


def test_the_consumer_closing_its_end_is_the_end_for_the_worker(channel):
    receiver, sender = channel
    assert sender.write(CreditRecord(3, 4).pack())
    sender.close()
    assert wait_readable([receiver], 5.0)
    assert receiver.read() == [(3, 4)]
    with pytest.raises(EOFError):
        receiver.read()


def test_a_record_for_a_worker_that_is_gone_counts_as_sent(channel):
    receiver, sender = channel
    receiver.close()  # the worker's end: its sentinel, not the channel, tells the consumer
    assert sender.write(CreditRecord(3, 5).pack()) is True
    assert not sender.pending


def _payload_in_this_worker(_):
    import multiprocessing

    (boot,) = multiprocessing.current_process()._args
    return len(boot.job.payload)


def test_the_pipeline_pickle_is_dropped_once_unpickled():
    """Neither the consumer nor a worker keeps the pipeline's pickle (a source it carries, e.g. a
    list of encoded images, would otherwise be held twice in every process)."""
    import numpy as np

    import grain_core as grain

    records = [np.full(1000, i, np.uint8).tobytes() for i in range(64)]
    ds = (
        grain.MapDataset.source(records)
        .map(_payload_in_this_worker)
        .to_iter_dataset(grain.ReadOptions(num_threads=0))
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    )
    it = iter(ds)
    try:
        assert [next(it) for _ in range(4)] == [0, 0, 0, 0]
        assert it._job.payload == b""
        assert it._job.worker_count == 2
    finally:
        it.close()
