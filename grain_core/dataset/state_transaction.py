"""The ``set_state`` transaction: a state is checked before anything changes, and a ``set_state``
that raises part way leaves every stage where it was.

:func:`atomic_set_state` wraps ``DatasetIterator.set_state`` and every subclass's own ``set_state``
(Grain-style stages included): it rewrites a state Grain's equivalent iterator saved against this
iterator's own (:mod:`grain_core.grain_states`), checks the value types against this iterator's
``get_state()`` (:func:`grain_core.state.check_state_types`), and on failure sets the state saved
before. Only the outermost call of a call tree snapshots and rolls back.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from grain_core import grain_states as _grain_states
from grain_core import state as _state

__all__ = ["atomic_set_state"]


_rollback = threading.local()


def _atomic_set(set_state: Callable[[Any, Any], None], self: Any, state: Any) -> None:
    """The body of :func:`atomic_set_state`'s wrapper (module-level: cloudpickle sends a class
    defined in ``__main__`` with its methods by value, with the globals they name, and a
    thread-local would not pickle)."""
    if _grain_states.is_grain_state(state):
        # A state Grain's equivalent iterator saved: rewritten against this iterator's own
        # (a user-written iterator whose own states have no kind keeps it as it is).
        template = self.get_state()
        if not _grain_states.is_grain_state(template):
            try:
                state = _grain_states.from_grain_state(state, template)
            except _state.StateMismatchError:
                if _grain_states.is_grain_mp_state(state):
                    raise  # no stage reads Grain's mp_prefetch states itself
                # Not a shape grain_states knows: stages that read Grain states themselves
                # (ElasticIterator, ...) get it as it is; the others refuse it below.
    if getattr(_rollback, "armed", False):
        set_state(self, state)
        return
    try:
        before = self.get_state()
    except Exception:  # nothing to go back to (e.g. a closed iterator): its own errors apply
        set_state(self, state)
        return
    _state.check_state_types(before, state)
    _rollback.armed = True
    try:
        set_state(self, state)
    except BaseException as error:
        try:
            unchanged = self.get_state() == before
        except Exception:
            unchanged = False
        if not unchanged:
            try:
                set_state(self, before)
            except Exception as again:
                error.add_note(
                    f"Putting {type(self).__name__} back where it was failed too ({again!r}); "
                    "create a new iterator before using it."
                )
        if isinstance(error, StopIteration):  # never let set_state look like exhaustion
            raise _state.StateMismatchError(
                f"{type(self).__name__}: the state points past the end of the input it replays: "
                "it comes from a different pipeline or was altered. The iterator is unchanged."
            ) from error
        raise
    finally:
        _rollback.armed = False


def atomic_set_state(set_state: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """Wraps a ``set_state``: types checked first, and the iterator put back if it raises.

    Only the outermost ``set_state`` of a call tree snapshots and rolls back (its rollback restores
    every stage below it), so a chain of ``n`` stages costs one extra ``get_state``, not ``n``.
    """

    @functools.wraps(set_state)
    def atomic(self: Any, state: Any) -> None:
        _atomic_set(set_state, self, state)

    atomic._grain_atomic = True  # type: ignore[attr-defined]
    return atomic
