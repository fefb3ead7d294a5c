"""Typed messages between the consumer and its Ray actors (each a frozen dataclass)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class WorkerEnvironment:
    """What a worker needs from the consumer's process before it unpickles the pipeline.

    ``sys_path`` is put in front of the actor's ``sys.path`` (entries that do not exist on the
    actor's node are harmless), ``env`` replaces the actor's ``GRAIN_CORE_*`` environment variables
    (plugin selection) and ``plugin_modules`` are the plugins registered explicitly in the consumer
    (``grain_core.plugins.register``), imported and registered again in the actor.
    """

    sys_path: tuple[str, ...]
    env: dict[str, str]
    plugin_modules: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Failure:
    """An exception raised in an actor: pickled when it survives a round trip, else None."""

    pickled: bytes | None
    type_name: str
    message: str
    traceback: str


@dataclasses.dataclass(frozen=True)
class Ready:
    """Sent once per actor after it built its iterator (or failed to).

    ``template`` is the fresh iterator's state (what ``set_state`` compares a saved worker state
    with), ``elastic_problem`` why elastic restore is undefined for this pipeline (None: defined),
    ``failure`` why the iterator could not be built (then ``template`` is None). ``node_id`` and
    ``pid`` say where the actor runs.
    """

    index: int
    template: Any
    elastic_problem: str | None
    failure: Failure | None
    node_id: str
    pid: int


@dataclasses.dataclass(frozen=True)
class StartFrom:
    """Move to ``state`` (None: the fresh iterator's state), then skip ``skip`` elements."""

    state: Any
    skip: int


@dataclasses.dataclass(frozen=True)
class Request:
    """Produce up to ``max_elements`` elements of generation ``generation`` (stopping earlier once
    ``max_bytes`` of numpy data or ``max_seconds`` are reached); ``start`` is set on the first
    request of a generation."""

    generation: int
    max_elements: int
    max_bytes: int
    max_seconds: float
    start: StartFrom | None = None


@dataclasses.dataclass(frozen=True)
class Batch:
    """Consecutive elements of one actor's share.

    ``state`` is the actor iterator's state before the first of ``elements``; ``end`` says the
    share is exhausted after them; ``failure`` that producing the next element raised (after the
    elements, which are valid).
    """

    generation: int
    state: Any
    elements: list[Any]
    end: bool = False
    failure: Failure | None = None
