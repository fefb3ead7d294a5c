"""One round-robin over worker shares: its order and its state format, for both stages that read
shares in turn -- ``mp_prefetch``'s consumer (:class:`grain_core.runtime.consumer.RoundRobinConsumer`)
and ``multithread_prefetch`` (:mod:`grain_core.runtime.multithread`).

**Order.** Share ``i`` of ``K`` is the pipeline built inside
:func:`grain_core.dataset.sharing.worker_share` ``(i, K)``. The output takes one element from each
share in turn (:func:`turn_after`), starting at ``next_worker``; a share found exhausted on its turn
is skipped from then on; the output ends when every share is exhausted. The order depends only on
the pipeline and ``K``.

**State** (one layout; ``kind`` names the stage that wrote it)::

    {"kind": ..., "num_workers": K, "next_worker": i, "position": n,
     "workers": [{"state": s, "skip": m, "exhausted": b}, ...]}

* ``workers[j]``: share ``j``'s pipeline-iterator state ``s`` (None: its fresh start), then ``m``
  more of its elements were returned (``0 <= m <=`` :data:`MAX_SKIP`); ``b``: it is exhausted.
* ``next_worker``: whose turn is next; ``position``: output elements returned (for messages).

:func:`make_state` writes it and :func:`read_state` checks all of it -- layout, numbers, and each
share's state against that share's fresh state (:func:`grain_core.state.check_same_pipeline`) --
before the caller changes anything, so a state of another pipeline is refused whole.

Why the two stages keep their own reading loops (``docs/architecture.md``, "One home per
mechanism"): the consumer reads messages from workers of a runtime (elements arrive in groups
positioned mid-message, with credits, generations and a one-store commit for interrupts), while
``multithread_prefetch`` reads in-process iterators directly, without pickling the pipeline, as
Grain's does (a runtime's worker gets its own unpickled copy of the pipeline). Both take turns with
:func:`turn_after` and read and write states only here.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from grain_core import state as _state
from grain_core.dataset import elastic

__all__ = ["MAX_SKIP", "RoundRobinState", "Share", "make_state", "read_state", "turn_after"]

#: The largest ``skip`` a state may hold: a share's state is taken at least every message, so a
#: state written by ``get_state()`` never skips more.
MAX_SKIP = 1 << 16


@dataclasses.dataclass(frozen=True)
class Share:
    """One share's entry of the state: its iterator ``state`` (None: fresh), then ``skip`` more
    elements returned; ``exhausted``: every element returned and the end seen."""

    state: Any = None
    skip: int = 0
    exhausted: bool = False


@dataclasses.dataclass(frozen=True)
class RoundRobinState:
    """A checked state: whose turn is next, output elements returned, one :class:`Share` each."""

    next_worker: int
    position: int
    shares: tuple[Share, ...]


def turn_after(i: int, k: int) -> int:
    """The share whose turn follows share ``i``'s among ``k``."""
    return i + 1 if i + 1 < k else 0


def make_state(kind: str, next_worker: int, position: int, shares: Sequence[Share]) -> dict[str, Any]:
    """The state of a round-robin over ``shares`` (see the module docstring)."""
    return _state.make_state(
        kind,
        num_workers=len(shares),
        next_worker=next_worker,
        position=position,
        workers=[{"state": s.state, "skip": s.skip, "exhausted": s.exhausted} for s in shares],
    )


def read_state(
    state: Any,
    kind: str,
    k: int,
    template: Callable[[int], Any] | None = None,
    *,
    elastic_for: Any = None,
) -> RoundRobinState:
    """Checks ``state`` (written by :func:`make_state` with ``kind`` for ``k`` shares) and returns
    it; raises :class:`grain_core.state.StateMismatchError` saying what is wrong. ``template(j)``,
    when given, is share ``j``'s fresh-iterator state (None: unknown, not checked); each share's
    saved state must be of the same pipeline.

    ``elastic_for``, when given, is the iterator that takes the state (a
    :class:`grain_core.dataset.elastic.ElasticSource`): a state saved with another worker count (or in process) is first
    converted for it by :func:`grain_core.dataset.elastic.adapt_state`, then checked here like any
    other. One pass: the state goes down once -- here, to the elastic conversion, to the checks."""
    if elastic_for is not None:
        state = elastic.adapt_state(elastic_for, state)
    _state.expect_state(state, kind, ("num_workers", "next_worker", "workers"), num_workers=k)
    workers = state["workers"]
    nxt = state["next_worker"]
    if not isinstance(workers, list) or len(workers) != k or not _is_int(nxt) or not 0 <= nxt < k:
        raise _state.StateMismatchError(f"The {kind!r} state does not describe {k} workers: {state!r}")
    for i, w in enumerate(workers):
        if isinstance(w, dict):
            _state.check_state_int(w.get("skip"), f"workers[{i}].skip", maximum=MAX_SKIP, where=kind)
        if not isinstance(w, dict) or not isinstance(w.get("exhausted", False), bool):
            raise _state.StateMismatchError(
                f"Malformed worker entry in the state: {w!r} (skip must be an int in "
                f"[0, {MAX_SKIP}], exhausted a bool): it was not written by get_state()."
            )
    position = state.get("position", 0)
    if not _is_int(position) or position < 0:
        raise _state.StateMismatchError(f"Malformed position in the state: {position!r}")
    if template is not None:
        for i, w in enumerate(workers):
            if w.get("state") is None:
                continue
            expected = template(i)
            if expected is not None:
                _state.check_same_pipeline(expected, w["state"], where=f"state.workers[{i}].state")
    shares = tuple(
        Share(w.get("state"), int(w["skip"]), bool(w.get("exhausted", False))) for w in workers
    )
    return RoundRobinState(int(nxt), int(position), shares)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)
