"""Ctrl-C (``KeyboardInterrupt``) inside a packer's ``next()``: put back where the call began.

A packer fills a round (or a row) over many parent reads and changes its own fields along the
way, so an interrupt part-way would leave it with elements read but not packed. Before a fill it
takes its own ``get_state()`` (exact there, and cheap: the parent's state is one it already holds,
or one ``get_state`` of the parent per fill); when the fill is interrupted it notes that state with
one plain assignment, reports it as its state, and restores it at the next call, which then fills
the same round again. Restoring is idempotent, so an interrupt during it (a second Ctrl-C) leaves
the note and the next call restores again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class RollbackOnInterrupt:
    """Mixin for a packer iterator with ``get_state`` / ``restore_state``; call
    :meth:`_undo_interrupted` first in ``next()`` and ``get_state()`` and run fills through
    :meth:`_fill_or_note`."""

    _rollback: Any = None  # the state to go back to, when an interrupted fill left one

    def get_state(self) -> Any:  # overridden by the stage; here for typing only
        raise NotImplementedError

    def restore_state(self, state: Any) -> None:  # overridden by the stage
        raise NotImplementedError

    def _fill_or_note(self, fill: Callable[[], None]) -> None:
        """Runs ``fill``; if an interrupt (a ``BaseException`` that is not an ``Exception``) ends
        it, notes the state from before it (restored by the next call). An ``Exception``
        propagates as it is (Grain's behaviour: what the fill read is consumed)."""
        saved = self.get_state()
        try:
            fill()
        except Exception:
            raise
        except BaseException:
            self._rollback = saved  # first, and a plain store: nothing can split it
            raise

    def _undo_interrupted(self) -> None:
        """Restores the state an interrupted fill noted. ``restore_state`` drops the note as it
        starts (it may call ``next()`` itself); an interrupt in it puts the note back."""
        saved = self._rollback
        try:
            self.restore_state(saved)
        except BaseException:
            self._rollback = saved
            raise
