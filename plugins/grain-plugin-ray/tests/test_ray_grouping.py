"""The actor endpoint's grouping (``ActorEndpoint.fetch`` holds messages until they make a group),
driven directly, without Ray: the hold ends only on the conditions it names, never by itself.

``HOLD_SECONDS`` is raised to an hour in these tests, so a fetch that returns did so because of a
group condition, not the time cap. A fetch that must still be holding is checked with a bounded
join: a correct endpoint never returns there, whatever the machine's speed.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from grain_plugin_ray import actor
from grain_plugin_ray.actor import GROUP_ELEMENTS, ActorEndpoint

from grain_core.author import Elements, End

STILL_HOLDING_S = 0.3  # how long a holding fetch is watched (it would hold for an hour)
BOUND_S = 60.0  # every wait for a fetch that must return is bounded by this


@pytest.fixture(autouse=True)
def long_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(actor, "HOLD_SECONDS", 3600.0)


class Fetch:
    """``endpoint.fetch(acked, 3600)`` in a thread."""

    def __init__(self, endpoint: ActorEndpoint, acked: int = 0):
        self.result: list[Any] | None = None
        self.thread = threading.Thread(target=self._run, args=(endpoint, acked), daemon=True)
        self.thread.start()

    def _run(self, endpoint: ActorEndpoint, acked: int) -> None:
        self.result = endpoint.fetch(acked, 3600.0)

    def holding(self) -> bool:
        self.thread.join(STILL_HOLDING_S)
        return self.thread.is_alive()

    def get(self) -> list[Any]:
        self.thread.join(BOUND_S)
        assert not self.thread.is_alive(), "fetch did not return"
        assert self.result is not None
        return self.result


def elements(seq: int, values: list[Any]) -> Elements:
    return Elements(seq, 0, None, 0, values)


def test_holds_until_group_elements() -> None:
    ep = ActorEndpoint(group_bytes=1 << 40)
    f = Fetch(ep)
    ep.send(elements(1, [0.0] * (GROUP_ELEMENTS - 1)))
    assert f.holding()
    ep.send(elements(2, [1.0]))
    got = f.get()
    assert [m.seq for m in got] == [1, 2]
    assert sum(len(m.elements) for m in got) == GROUP_ELEMENTS


def test_holds_until_group_bytes() -> None:
    big = np.zeros(1 << 16, np.uint8)  # 64 KiB
    ep = ActorEndpoint(group_bytes=4 * big.nbytes)
    f = Fetch(ep)
    ep.send(elements(1, [big, big, big]))
    assert f.holding()
    ep.send(elements(2, [big]))
    assert [m.seq for m in f.get()] == [1, 2]


def test_other_message_ends_the_hold() -> None:
    ep = ActorEndpoint(group_bytes=1 << 40)
    f = Fetch(ep)
    ep.send(elements(1, [0.0]))
    assert f.holding()
    ep.send(End(2, 0))
    assert [type(m).__name__ for m in f.get()] == ["Elements", "End"]


def test_waiting_loop_ends_the_hold() -> None:
    ep = ActorEndpoint(group_bytes=1 << 40)
    f = Fetch(ep)
    ep.send(elements(1, [0.0]))
    assert f.holding()
    # The loop waits for a command (its bound is reached): nothing more comes until one arrives.
    loop = threading.Thread(target=ep.receive, args=(BOUND_S,), daemon=True)
    loop.start()
    assert [m.seq for m in f.get()] == [1]
    ep.post(0, "a command")
    loop.join(BOUND_S)
    assert not loop.is_alive()


def test_polling_loop_does_not_end_the_hold() -> None:
    ep = ActorEndpoint(group_bytes=1 << 40)
    f = Fetch(ep)
    ep.send(elements(1, [0.0]))
    assert ep.receive(0) is None  # the loop polls between elements: still producing
    assert f.holding()
    ep.hurry()
    assert [m.seq for m in f.get()] == [1]


def test_hurry_ends_the_hold_once() -> None:
    ep = ActorEndpoint(group_bytes=1 << 40)
    f = Fetch(ep)
    ep.send(elements(1, [0.0]))
    assert f.holding()
    ep.hurry()
    assert [m.seq for m in f.get()] == [1]
    g = Fetch(ep, acked=1)  # the hurry was spent by the fetch it ended
    ep.send(elements(2, [0.0]))
    assert g.holding()
    ep.hurry()
    assert [m.seq for m in g.get()] == [2]


def test_hurry_before_the_fetch_applies_to_it() -> None:
    ep = ActorEndpoint(group_bytes=1 << 40)
    ep.hurry()
    ep.send(elements(1, [0.0]))
    assert [m.seq for m in Fetch(ep).get()] == [1]


def test_acknowledged_messages_leave_the_group_count() -> None:
    ep = ActorEndpoint(group_bytes=1 << 40)
    ep.send(elements(1, [0.0] * GROUP_ELEMENTS))
    assert [m.seq for m in Fetch(ep).get()] == [1]  # a whole group: at once
    f = Fetch(ep, acked=1)  # message 1 acknowledged: its elements no longer count
    ep.send(elements(2, [0.0]))
    assert f.holding()
    ep.send(elements(3, [0.0] * (GROUP_ELEMENTS - 1)))
    assert [m.seq for m in f.get()] == [2, 3]


def test_unacknowledged_messages_are_returned_again() -> None:
    ep = ActorEndpoint(group_bytes=1 << 40)
    ep.send(elements(1, [0.0] * GROUP_ELEMENTS))
    assert [m.seq for m in Fetch(ep).get()] == [1]
    # A consumer interrupted before it read that result fetches with the old acknowledgement.
    assert [m.seq for m in Fetch(ep, acked=0).get()] == [1]


def test_nothing_to_send_and_uncredited_elements_end_the_wait() -> None:
    """A fetch with nothing to return waits for messages, except while the loop waits for a
    command with elements sent and not credited (it may wait for a credit): that fetch returns
    at once, so the consumer's next one, which carries the credit, is not held up."""
    from grain_core.author import Consumed

    ep = ActorEndpoint(group_bytes=1 << 40)
    ep.send(elements(1, [0.0] * 3))
    ep.send(elements(2, [0.0] * 2))
    got: list[Any] = []
    loop = threading.Thread(target=lambda: got.append(ep.receive(BOUND_S)), daemon=True)
    loop.start()
    assert [m.seq for m in Fetch(ep).get()] == [1, 2]  # the waiting loop ends the hold
    assert Fetch(ep, acked=2).get() == []  # 5 sent, none credited: at once
    ep.post(0, Consumed(0, 3))
    loop.join(BOUND_S)
    assert got == [Consumed(0, 3)]
    loop = threading.Thread(target=ep.receive, args=(BOUND_S,), daemon=True)
    loop.start()
    assert Fetch(ep, acked=2).get() == []  # 2 still not credited
    ep.post(1, Consumed(0, 5))
    loop.join(BOUND_S)
    loop = threading.Thread(target=ep.receive, args=(BOUND_S,), daemon=True)
    loop.start()
    f = Fetch(ep, acked=2)
    assert f.holding()  # all credited: the loop waits for something else, the fetch waits
    ep.send(elements(3, [0.0]))
    assert [m.seq for m in f.get()] == [3]
    ep.post(2, Consumed(0, 6))
    loop.join(BOUND_S)
