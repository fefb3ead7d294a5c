"""ResumePoint (no Ray needed): what a replacement actor is told and how its stream is presented."""

from __future__ import annotations

from grain_plugin_ray.resume import ResumePoint

from grain_core.runtime.api import Consumed, Elements, End, Idle, Mark, Start, Template


def test_a_replacement_continues_after_the_last_elements_received():
    r = ResumePoint()
    r.sent(Start(1, None, 0))
    assert r.received_message(Template(1, {"s": 0}, None)) == Template(1, {"s": 0}, None)
    r.received_message(Elements(2, 1, {"s": 0}, 0, ["a", "b"]))
    r.received_message(Elements(3, 1, {"s": 2}, 1, ["c"]))
    r.received_message(Elements(3, 1, {"s": 2}, 1, ["c"]))  # received again: counted once
    assert r.sent(Consumed(1, 2)) == Consumed(1, 2)
    # Start from the last state received, skipping what came after it (no credit yet: the 2
    # elements consumed were the old actor's); credits become relative to the new actor.
    assert r.replacement() == [Start(1, {"s": 2}, 2)]
    assert r.sent(Consumed(1, 3)) == Consumed(1, 0)
    assert r.sent(Consumed(1, 5)) == Consumed(1, 2)
    # The new actor's template is hidden, its messages numbered after the old one's.
    assert r.received_message(Template(1, {"s": 0}, None)) is None
    assert r.received_message(Elements(2, 1, {"s": 9}, 0, ["d"])).seq == 5
    assert r.received_message(End(3, 1)) == End(6, 1)
    assert r.replacement() == [Idle(1), Consumed(1, 5)]
    assert r.sent(Consumed(1, 5)) == Consumed(1, 1)  # 4 elements came from earlier actors


def test_a_replacement_starts_from_the_last_mark_received():
    r = ResumePoint()
    r.sent(Start(1, None, 0))
    marks = (Mark(1, {"s": 1}), Mark(3, {"s": 3}))
    r.received_message(Elements(1, 1, {"s": 0}, 0, ["a", "b", "c", "d", "e"], marks))
    assert r.replacement() == [Start(1, {"s": 3}, 2)]


def test_a_new_generation_starts_over():
    r = ResumePoint()
    r.sent(Start(1, None, 0))
    r.received_message(Elements(1, 1, None, 0, ["a"]))
    r.sent(Start(1, None, 0))  # a re-sent command of the same generation changes nothing
    assert r.replacement()[0] == Start(1, None, 1)
    r.sent(Start(2, {"s": 7}, 3))
    r.received_message(Elements(2, 1, None, 1, ["old generation"]))
    assert r.replacement() == [Start(2, {"s": 7}, 3)]
