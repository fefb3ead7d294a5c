"""The one-host path: actors on the consumer's Ray node send their groups through shared memory.

The first tests drive the actor's endpoint and the consumer's reader without Ray (real segments in
``/dev/shm``); the others run real actors on the session's local Ray instance. Every test checks
that nothing of this process is left in ``/dev/shm`` afterwards: after a normal end, a worker's
exception, a killed actor (reported or replaced) and an interrupted iteration.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from grain_plugin_ray import RayRuntime
from grain_plugin_ray.actor import ActorEndpoint
from grain_plugin_ray.shm_path import Lending, ShmGroup, ShmReceiver, ShmSender, forget_prefix
from ray_pipelines import pipeline

import grain_core as grain
from grain_core.author import AHEAD_BYTES, Elements, WorkerError, new_shm_prefix
from grain_core.testing import drain_with_interrupts
from grain_core.testing.compare import assert_elements_equal

pytestmark = pytest.mark.timeout(300)

MP = grain.MultiprocessingOptions
RT = RayRuntime(num_cpus=0)
HELD_BACK = RayRuntime(num_cpus=0, ahead_bytes=AHEAD_BYTES)


def ours() -> list[str]:
    """This process's segments in /dev/shm (names carry the consumer's pid)."""
    mine = f"gcrt{os.getpid()}x"
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(mine))


@pytest.fixture(autouse=True)
def nothing_left_behind():
    assert ours() == []
    yield
    assert ours() == []


def big_pipeline(n: int = 31) -> grain.IterDataset:
    """``ray_pipelines.pipeline`` (shuffle, thread prefetch, random draws) with a 256 KiB leaf."""
    return pipeline(n).map(lambda e: {**e, "big": np.full(1 << 15, e["x"], np.int64)})


def _take(lending: Lending, acked: int) -> list[int]:
    """What the consumer's next fetch acknowledging ``acked`` gives back (as ``RayChannel`` does)."""
    numbers = lending.ready(acked)
    lending.given(numbers)
    return numbers


def _message(seq: int, n: int = 2) -> Elements:
    return Elements(seq, 0, {"at": seq}, 0, [np.full(1 << 14, seq * 10 + i) for i in range(n)])


# --- without Ray ------------------------------------------------------------------------------------


def test_endpoint_reuses_a_segment_once_its_part_is_given_back():
    prefix = new_shm_prefix()
    sender, receiver, lending = ShmSender(prefix), ShmReceiver(), Lending()
    endpoint = ActorEndpoint(group_bytes=0, sender=sender)
    try:
        segments = set()
        acked = 0
        given_back: list[int] = []
        for seq in range(1, 11):
            endpoint.send(_message(seq))
            (group,) = endpoint.fetch(acked, wait_s=5, released=given_back)
            assert isinstance(group, ShmGroup) and group.seq == seq
            segments.update(name for name, _, _ in group.parts)
            got = receiver.decode(group, "test", lending)
            assert isinstance(got, Elements) and got.state == {"at": seq}
            for i, a in enumerate(got.elements):
                np.testing.assert_array_equal(a, np.full(1 << 14, seq * 10 + i))
                assert a.flags.writeable
            # Read again (a fetch result read twice after an interruption): the part goes back
            # once the arrays of both reads are gone.
            again = receiver.decode(group, "test", lending).elements
            assert [int(a[0]) for a in again] == [seq * 10, seq * 10 + 1]
            del got, a
            gc.collect()
            assert _take(lending, seq) == []  # ``again`` still holds the part
            del again
            gc.collect()
            # Not before its group is acknowledged (a group not acknowledged may come again and
            # be read from its segment again) ...
            assert _take(lending, seq - 1) == []
            given_back = _take(lending, seq)  # ... given back with the fetch that acknowledges it
            assert given_back == list(group.numbers) and len(given_back) == 1
            acked = seq
        # Given back one by one: the segment of group k is free again when group k + 1 is sent
        # (released before the next write), so two segments serve all ten groups.
        assert len(segments) <= 2, segments
        # A group fetched again (the consumer was interrupted before acknowledging it) is the same
        # descriptor and reads back the same elements.
        endpoint.send(_message(11))
        first = endpoint.fetch(acked, wait_s=5, released=given_back)
        again = endpoint.fetch(acked, wait_s=5)
        assert first == again
        assert int(receiver.decode(again[0], "test", lending).elements[1][0]) == 111
    finally:
        sender.close()
        receiver.close()
        forget_prefix(prefix)


def test_lending_settles_each_read_once_and_waits_for_the_acknowledgement():
    lending = Lending()
    first, second = lending.lend(5, seq=3), lending.lend(5, seq=3)  # part 5 read twice
    first()
    first()  # a read that failed, then its finalizer: that read is settled once
    assert _take(lending, 3) == []  # the second read's arrays are still out
    second()
    assert _take(lending, 2) == []  # its message (seq 3) is not acknowledged yet
    assert lending.ready(3) == [5]
    assert lending.ready(3) == [5]  # until given: a send that was interrupted is sent again
    lending.given([5])
    assert _take(lending, 3) == []


def test_a_part_the_user_holds_is_never_rewritten():
    """Elements kept by the user keep their part out: later groups go to other segments, and the
    kept arrays keep their values; once dropped, the part goes back and its segment is reused."""
    prefix = new_shm_prefix()
    sender, receiver, lending = ShmSender(prefix), ShmReceiver(), Lending()
    endpoint = ActorEndpoint(group_bytes=0, sender=sender)
    try:
        endpoint.send(_message(1))
        (first,) = endpoint.fetch(0, wait_s=5)
        kept = receiver.decode(first, "test", lending).elements
        later = set()
        for seq in range(2, 8):
            endpoint.send(_message(seq))
            (group,) = endpoint.fetch(seq - 1, wait_s=5, released=_take(lending, seq - 1))
            later.update(name for name, _, _ in group.parts)
            receiver.decode(group, "test", lending)  # dropped at once: given back
        assert first.parts[0][0] not in later
        assert [int(a[0]) for a in kept] == [10, 11] and all((a == a[0]).all() for a in kept)
        del kept
        gc.collect()
        taken = _take(lending, 7)  # group 1's part, and group 7's (dropped, not given back yet)
        assert sorted(taken) == sorted([*first.numbers, *group.numbers])
        # Given back with this fetch: the segments of those two parts are the free ones when
        # group 8 is written.
        assert endpoint.fetch(7, wait_s=0, released=taken) == []
        endpoint.send(_message(8))
        (group,) = endpoint.fetch(7, wait_s=5)
        assert group.parts[0][0] in {first.parts[0][0], *later}
    finally:
        sender.close()
        receiver.close()
        forget_prefix(prefix)


def test_a_large_message_is_written_in_parts_of_about_part_bytes():
    """A message of 10 x 256 KiB goes in parts of about PART_BYTES (1 MiB) each, so an actor's
    segments keep one size; the elements come back in order."""
    prefix = new_shm_prefix()
    sender, receiver, lending = ShmSender(prefix), ShmReceiver(), Lending()
    endpoint = ActorEndpoint(group_bytes=0, sender=sender)
    try:
        big = Elements(1, 0, None, 0, [np.full(1 << 15, i) for i in range(10)])
        endpoint.send(big)
        (group,) = endpoint.fetch(0, wait_s=5)
        assert isinstance(group, ShmGroup) and len(group.parts) == 3  # 4 + 4 + 2 elements
        got = receiver.decode(group, "test", lending).elements
        assert [int(a[0]) for a in got] == list(range(10))
        del got
        gc.collect()
        # Acknowledges the message and gives its three parts back.
        assert endpoint.fetch(1, wait_s=0, released=_take(lending, 1)) == []
        endpoint.send(_message(2))  # its three segments are released before this write
        (group,) = endpoint.fetch(1, wait_s=5)
        assert {name for name, _, _ in group.parts} <= {f"{prefix}_{i}" for i in range(3)}
    finally:
        sender.close()
        receiver.close()
        forget_prefix(prefix)


def test_small_elements_and_other_messages_travel_as_they_are():
    prefix = new_shm_prefix()
    sender = ShmSender(prefix)
    endpoint = ActorEndpoint(group_bytes=0, sender=sender)
    try:
        small = Elements(1, 0, None, 0, [1, 2.5, np.arange(3)])
        endpoint.send(small)
        assert endpoint.fetch(0, wait_s=5) == [small]
    finally:
        sender.close()
        forget_prefix(prefix)


def test_a_full_dev_shm_sends_the_group_through_the_object_store(monkeypatch):
    """Below ``GRAIN_CORE_SHM_MIN_FREE_MB`` free the group stays a plain ``Elements`` (Ray's
    object store carries it) and the writer's order of groups in flight is kept."""
    monkeypatch.setenv("GRAIN_CORE_SHM_MIN_FREE_MB", str(1 << 30))
    prefix = new_shm_prefix()
    sender = ShmSender(prefix)
    endpoint = ActorEndpoint(group_bytes=0, sender=sender)
    try:
        message = _message(1)
        endpoint.send(message)
        assert endpoint.fetch(0, wait_s=5) == [message]
        assert sender.fallbacks == 1
        endpoint.send(_message(2))
        assert endpoint.fetch(1, wait_s=5)[0].seq == 2
    finally:
        sender.close()
        forget_prefix(prefix)


# --- real actors -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_actors_on_this_node_send_through_shared_memory():
    """Same elements, order and states as mp_prefetch; fresh writable arrays; restorable both
    ways."""
    ref = list(iter(big_pipeline().mp_prefetch(MP(num_workers=2))))
    with iter(big_pipeline().mp_prefetch(MP(num_workers=2), runtime=RT)) as it:
        head = [next(it) for _ in range(7)]
        assert all(c.location(60).shared_memory for c in it.pool.channels)
        state = it.get_state()
        rest = list(it)
    assert_elements_equal(ref, head + rest, "shared-memory path")
    for e in head + rest:
        assert e["big"].flags.writeable and int(e["big"][-1]) == e["x"]
    with iter(big_pipeline().mp_prefetch(MP(num_workers=2))) as again:
        again.set_state(state)
        assert_elements_equal(rest, list(again), "restored in worker processes")


@pytest.mark.usefixtures("ray_local")
def test_switched_off_the_actors_use_the_object_store():
    store = RayRuntime(num_cpus=0, shared_memory=False)
    with iter(big_pipeline(8).mp_prefetch(MP(num_workers=2), runtime=store)) as it:
        got = list(it)
        assert not any(c.location(60).shared_memory for c in it.pool.channels)
    assert not got[0]["big"].flags.writeable  # a view of the object store


@pytest.mark.usefixtures("ray_local")
def test_nothing_left_after_a_worker_exception():
    def boom(e):
        if e["x"] == 9:
            raise KeyError("bad element 9")
        return e

    ds = big_pipeline().map(boom).mp_prefetch(MP(num_workers=2), runtime=RT)
    with iter(ds) as it, pytest.raises(KeyError, match="bad element 9"):
        for _ in it:
            pass


@pytest.mark.usefixtures("ray_local")
def test_nothing_left_after_a_killed_actor():
    import ray

    it = iter(big_pipeline(61).mp_prefetch(MP(num_workers=2), runtime=HELD_BACK))
    for _ in range(5):
        next(it)
    ray.kill(it.pool.channels[1].actor, no_restart=True)
    with pytest.raises(WorkerError, match="died"):
        for _ in it:
            pass
    it.close()


@pytest.mark.usefixtures("ray_local")
def test_nothing_left_after_a_replaced_actor_and_the_output_stays_exact():
    import ray

    ref = list(iter(big_pipeline(61).mp_prefetch(MP(num_workers=2))))
    restarting = RayRuntime(num_cpus=0, ahead_bytes=AHEAD_BYTES, max_restarts=1)
    with iter(big_pipeline(61).mp_prefetch(MP(num_workers=2), runtime=restarting)) as it:
        got = [next(it) for _ in range(5)]
        ray.kill(it.pool.channels[1].actor, no_restart=True)
        got += list(it)
        assert it.pool.channels[1].restarts == 1
    assert_elements_equal(ref, got, "after a replaced actor")


@pytest.mark.usefixtures("ray_local")
def test_nothing_left_after_an_interrupted_iteration():
    """KeyboardInterrupt in the training loop inside ``with``, and real SIGALRM interrupts inside
    ``next()`` (wherever grain_core or the plugin runs, reading a group included): nothing lost
    or repeated, and nothing left in /dev/shm."""
    import grain_plugin_ray

    with pytest.raises(KeyboardInterrupt):
        with iter(big_pipeline().mp_prefetch(MP(num_workers=2), runtime=RT)) as it:
            for i, _ in enumerate(it):
                if i == 10:
                    raise KeyboardInterrupt
    ref = [int(e["x"]) for e in big_pipeline()]
    with iter(big_pipeline().mp_prefetch(MP(num_workers=2), runtime=RT)) as it:
        out, raised = drain_with_interrupts(it, packages=(grain, grain_plugin_ray))
    assert [int(e["x"]) for e in out] == ref, raised
    for e in out:
        assert int(e["big"][0]) == e["x"]
