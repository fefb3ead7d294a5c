"""The runtime's typed messages: what a consumer sends a worker and what a worker sends back.

Part of the runtime API (:mod:`grain_core.runtime.api` re-exports every public name; see the module
docstring there and ``docs/runtime.md``). Every message from the consumer (:data:`ToWorker`) is
idempotent (a generation number and absolute counts); every message from a worker
(:data:`FromWorker`) carries ``seq``, its number in that worker's stream. Messages are frozen
dataclasses (and two named tuples), picklable with plain ``pickle``.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any, NamedTuple

__all__ = [
    "Consumed",
    "Elements",
    "End",
    "Failure",
    "FromWorker",
    "Idle",
    "Mark",
    "Position",
    "Start",
    "Stats",
    "Stop",
    "Template",
    "ToWorker",
    "pickle_exception",
]


@dataclasses.dataclass(frozen=True)
class Start:
    """Consumer -> worker: produce from ``state`` (None: the fresh iterator) after skipping
    ``skip`` elements, in ``generation``. A repeated ``Start`` of the current generation is ignored."""

    generation: int
    state: Any
    skip: int


@dataclasses.dataclass(frozen=True)
class Idle:
    """Consumer -> worker: the worker is exhausted in ``generation``; wait for a command."""

    generation: int


@dataclasses.dataclass(frozen=True)
class Consumed:
    """Consumer -> worker: the consumer's ``next()`` returned ``elements`` of this worker's elements
    in ``generation`` (an absolute count: re-sending it is harmless)."""

    generation: int
    elements: int


@dataclasses.dataclass(frozen=True)
class Stop:
    """Consumer -> worker: end the worker loop."""


@dataclasses.dataclass(frozen=True)
class Template:
    """Worker -> consumer, first message: the state of the worker's fresh iterator (None: it could
    not be built; the error comes with the first ``Start``) and why elastic restore is undefined
    for it (None: defined)."""

    seq: int
    state: Any
    elastic_problem: str | None


class Position(NamedTuple):
    """A position in a worker's share: ``skip`` elements after the iterator state ``state``."""

    state: Any
    skip: int


class Mark(NamedTuple):
    """A worker state inside a message: ``elements[offset]`` comes right after ``state``."""

    offset: int
    state: Any


@dataclasses.dataclass(frozen=True)
class Elements:
    """Worker -> consumer: ``elements`` in order; the first of them comes ``skip`` elements after
    the worker's iterator state ``state``. ``marks`` (ascending offsets, none at 0) are states the
    worker took between elements, so a position inside the message needs few elements skipped."""

    seq: int
    generation: int
    state: Any
    skip: int
    elements: list[Any]
    marks: tuple[Mark, ...] = ()

    def position_after(self, n: int) -> Position:
        """The position after the first ``n`` elements: from the last mark at or before element
        ``n``, else from ``state``."""
        marks = self.marks
        if marks:
            i = bisect.bisect_right(marks, n, key=_mark_offset)
            if i:
                m = marks[i - 1]
                return Position(m.state, n - m.offset)
        return Position(self.state, self.skip + n)


def _mark_offset(m: Mark) -> int:
    return m.offset


@dataclasses.dataclass(frozen=True)
class End:
    """Worker -> consumer: the worker's share is exhausted in ``generation``."""

    seq: int
    generation: int


@dataclasses.dataclass(frozen=True)
class Failure:
    """Worker -> consumer: producing raised. ``exception`` is the cloudpickled exception when it
    round-trips through pickle (else None); ``traceback`` is the worker's formatted traceback."""

    seq: int
    generation: int
    exception: bytes | None
    traceback: str


@dataclasses.dataclass(frozen=True)
class Stats:
    """Worker -> consumer, only when statistics are collected: the worker's counters, sent just
    before the :class:`Elements` they include."""

    seq: int
    generation: int
    report: Any


ToWorker = Start | Idle | Consumed | Stop
FromWorker = Template | Elements | End | Failure | Stats


def pickle_exception(e: BaseException) -> bytes | None:
    """``e`` cloudpickled if it unpickles again, else None."""
    import pickle

    import cloudpickle

    try:
        data = cloudpickle.dumps(e)
        pickle.loads(data)
        return data
    except Exception:
        return None
