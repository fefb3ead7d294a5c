"""The stage-author API: base classes for new pipeline stages (see ``docs/writing-plugins.md``).

A stage is a dataset class (what the user builds: ``MapDataset`` / ``IterDataset``) and, for
``IterDataset`` stages, an iterator class (what runs: ``DatasetIterator``). Everything a stage needs
from the kernel is a public name on those classes or here:

Datasets (``MapDataset`` / ``IterDataset`` and the classes below)
  ``parents`` — the datasets read from; ``parent`` (one-parent stages) — the only one.
  ``resolve_seed(seed)`` — the declared seed use: an explicit seed, else the pipeline seed derived
  for this position, else a fixed default (the seed contract).
  ``fingerprint_fields()`` (map stages) — named values identifying the stage in states.
  ``element_at(index)`` (map stages) — the element hook; ``__getitems__(indices)`` for many.

Iterators (``DatasetIterator`` and the classes below)
  ``parents`` / ``parent``; ``options`` and ``apply_options(options)`` — pipeline options;
  ``get_state()``; ``state_fields()`` — the declared state fields (``grain_core.state.StateField``);
  ``check_state(state)`` — validation without change; ``restore_state(state)`` — the move, which the
  kernel's ``set_state`` runs after the checks and rolls back if it raises;
  ``next_chunk(max_elements)`` where the kernel has it (the chunk path; default: one ``next()``).

Sources: a random-access source is any object with ``__len__`` / ``__getitem__`` (optionally a bulk
``__getitems__``), see :class:`grain_core.sources.RandomAccessDataSource`; ``MapDataset.source(src)``
wraps it. An ``IterDataset`` source subclasses :class:`SourceIterDataset` and its iterator
:class:`SourceIterator` (no parents).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from grain_core import state as _state
from grain_core.dataset.base import IterDataset, MapDataset
from grain_core.dataset.iterator import DatasetIterator
from grain_core.state import StateField
from grain_core.validation import check_instance

T = TypeVar("T")

__all__ = [
    "ManyParentIterDataset",
    "ManyParentIterator",
    "OneParentIterDataset",
    "OneParentIterator",
    "OneParentMapDataset",
    "SourceIterDataset",
    "SourceIterator",
    "StateField",
]


def _check_parent(parent: Any, expected: type, stage: str) -> None:
    check_instance(parent, expected, stage, verb="expects")


class OneParentMapDataset(MapDataset[T]):
    """A map stage reading one ``MapDataset``.

    Defaults: ``len`` is the parent's, ``element_at(i)`` is ``parent.element_at(i)`` and
    ``__getitems__`` reads each index through ``element_at``. Override what the stage changes.
    """

    def __init__(self, parent: MapDataset):
        _check_parent(parent, MapDataset, type(self).__name__)
        super().__init__(parent)

    @property
    def parent(self) -> MapDataset:
        """The dataset this stage reads."""
        return self.parents[0]

    def __len__(self) -> int:
        return len(self.parent)

    def element_at(self, index: int) -> Any:
        return self.parent.element_at(index)


class OneParentIterDataset(IterDataset[T]):
    """An ``IterDataset`` stage reading one ``IterDataset`` (``parent``); implement ``__iter__``."""

    def __init__(self, parent: IterDataset):
        _check_parent(parent, IterDataset, type(self).__name__)
        super().__init__(parent)

    @property
    def parent(self) -> IterDataset:
        """The dataset this stage reads."""
        return self.parents[0]


class ManyParentIterDataset(IterDataset[T]):
    """An ``IterDataset`` stage reading several ``IterDataset``s (``parents``)."""

    def __init__(self, parents: Sequence[IterDataset]):
        parents = list(parents)
        for p in parents:
            _check_parent(p, IterDataset, type(self).__name__)
        super().__init__(parents)


class SourceIterDataset(IterDataset[T]):
    """An ``IterDataset`` with no parent (it reads files, a service, ...); implement ``__iter__``."""

    def __init__(self) -> None:
        super().__init__(())


class _PositionedIterator(DatasetIterator[T]):
    """The position hooks of the ready states of :class:`OneParentIterator` and
    :class:`ManyParentIterator`: a stage's own state fields besides its parents' states."""

    def position_fields(self) -> Mapping[str, StateField]:
        """This stage's own state fields besides its parents' states (default: none)."""
        return {}

    def position_state(self) -> dict[str, Any]:
        """The values of :meth:`position_fields` (default: none)."""
        return {}

    def restore_position(self, state: Mapping[str, Any]) -> None:
        """Takes the values of :meth:`position_fields` from a checked ``state``."""


class OneParentIterator(_PositionedIterator[T]):
    """An iterator reading one parent iterator (``parent``); implement ``__next__``.

    Its default state is ``{"kind", "parent": the parent's state, **position_state()}``: a stage
    whose own position is a few values declares them in ``position_fields()`` and returns them from
    ``position_state()`` / takes them in ``restore_position(state)`` (after the parent is
    restored). ``set_state`` is the kernel's: it checks the kind and the declared fields before
    anything moves, then restores (the parent checks its own state), rolled back on error. A
    stage with another state shape overrides ``get_state``, ``state_fields`` and ``restore_state``.
    """

    def __init__(self, parent: DatasetIterator):
        _check_parent(parent, DatasetIterator, type(self).__name__)
        super().__init__(parent)

    @property
    def parent(self) -> DatasetIterator:
        """The iterator this one reads."""
        return self.parents[0]

    def get_state(self) -> dict[str, Any]:
        return _state.make_state(
            self.state_kind, parent=self.parent.get_state(), **self.position_state()
        )

    def state_fields(self) -> Mapping[str, StateField]:
        return {"parent": StateField.opaque(nullable=False), **self.position_fields()}

    def restore_state(self, state: Mapping[str, Any]) -> None:
        self.parent.set_state(state["parent"])
        self.restore_position(state)


class ManyParentIterator(_PositionedIterator[T]):
    """An iterator reading several parent iterators.

    Its default state is ``{"kind", "parents": [parent states], **position_state()}``: a stage
    whose own position is a few ints declares them in ``position_fields()`` and returns them from
    ``position_state()`` / takes them in ``restore_position(state)``; ``set_state`` checks the
    parents' states (each by its parent) and the positions before anything moves.
    """

    def __init__(self, parents: Sequence[DatasetIterator]):
        parents = list(parents)
        for p in parents:
            _check_parent(p, DatasetIterator, type(self).__name__)
        super().__init__(parents)

    def get_state(self) -> dict[str, Any]:
        return _state.make_state(
            self.state_kind, parents=[p.get_state() for p in self.parents], **self.position_state()
        )

    def state_fields(self) -> Mapping[str, StateField]:
        return {"parents": StateField.opaque(nullable=False), **self.position_fields()}

    def check_state(self, state: Any) -> None:
        super().check_state(state)
        subs = state["parents"]
        if not isinstance(subs, list) or len(subs) != len(self.parents):
            n = len(subs) if isinstance(subs, list) else type(subs).__name__
            raise _state.StateMismatchError(
                f"{self.state_kind}: parents {n} vs {len(self.parents)} — the state describes "
                "another number of parents: it comes from a different pipeline."
            )
        for p, sub in zip(self.parents, subs):
            p.check_state(sub)

    def restore_state(self, state: Mapping[str, Any]) -> None:
        for p, sub in zip(self.parents, state["parents"]):
            p.set_state(sub)
        self.restore_position(state)


class SourceIterator(DatasetIterator[T]):
    """An iterator with no parent; implement ``__next__``, ``get_state``, ``state_fields`` and
    ``restore_state``, and ``close`` if it holds files."""

    def __init__(self) -> None:
        super().__init__(())
