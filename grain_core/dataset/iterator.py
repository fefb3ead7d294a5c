"""``DatasetIterator``: the stateful, checkpointable iterator every stage's ``__iter__`` returns.

The iterator protocol of the stage-author API: ``__next__``, the chunk protocol (``next_chunk``,
give-back with ``unread``/``can_unread``), states (``get_state``, ``set_state`` through
:mod:`~grain_core.dataset.state_transaction`, declared ``state_fields``), options, prefetch start,
``close`` and Orbax ``save``/``load``. One thread at a time (:mod:`grain_core.dataset.concurrency`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from grain_core import state as _state
from grain_core.dataset.concurrency import guard_class, set_stats_recorder, stats_recorder
from grain_core.dataset.grain_attrs import IteratorAttrs
from grain_core.dataset.locator import StageTable
from grain_core.dataset.state_transaction import atomic_set_state
from grain_core.state import StateField

if TYPE_CHECKING:
    from grain_core.options import DatasetOptions

__all__ = ["CheckpointIO", "DatasetIterator", "checkpoint_io"]

T = TypeVar("T")


class DatasetIterator(IteratorAttrs, Iterator[T], abc.ABC):
    """A stateful, checkpointable iterator. Not thread-safe: use it from one thread at a time (a
    second thread calling ``next``/``next_chunk``/``get_state``/``set_state`` while another is inside
    gets :class:`~grain_core.dataset.concurrency.ConcurrentIteratorUseError`, never a hang).

    ``get_state()`` returns a JSON-serialisable dict (see :mod:`grain_core.state`); ``set_state`` on a
    fresh iterator of the same pipeline continues with exactly the same elements.
    """

    #: True for iterators with one parent that return exactly one element per parent element, in
    #: order, and whose state is either the parent's state or ``{"kind", "parent", ...}`` where an
    #: int field ``count`` (if any) is the number of elements returned and every other field is
    #: identifying (a seed). Elastic restore (``grain_core.dataset.elastic``) relies on it.
    one_to_one: bool = False

    #: The give-back capability of the chunk protocol: True where :meth:`unread` works. A stage
    #: implementing ``unread`` sets it on the class, or per instance where it depends on the
    #: parents (``self.can_unread = parent.can_unread``).
    can_unread: bool = False

    def __init__(self, parents: DatasetIterator | Sequence[DatasetIterator] = ()):
        self._parents = (parents,) if isinstance(parents, DatasetIterator) else tuple(parents)
        self._options: DatasetOptions | None = None

    @property
    def parents(self) -> Sequence[DatasetIterator]:
        """The iterators this one reads from."""
        return self._parents

    def __iter__(self) -> DatasetIterator[T]:
        return self

    @abc.abstractmethod
    def __next__(self) -> T: ...

    def next_chunk(self, max_elements: int) -> list[T]:
        """Returns the next 1 to ``max_elements`` elements, in order, as a list.

        Raises ``StopIteration`` when the iterator is exhausted. Afterwards ``get_state()`` is the
        position after the last element returned, exactly as after the same number of ``next()``
        calls, and ``next()`` and ``next_chunk()`` calls may be mixed freely.

        This is the chunk protocol of the stage-author API: a stage that works on whole lists
        (``map``, ``filter``, ``batch``, the packers, ...) pulls chunks from its parent and returns
        chunks, so per-element Python overhead is paid once per chunk. This default returns one
        element from ``next()``, so every iterator supports the protocol; override it when the stage
        can produce several elements at once more cheaply. How many elements come back is up to the
        stage (fewer than asked is always allowed), never which ones.
        """
        return [self.__next__()]

    def unread(self, count: int) -> None:
        """Gives back the last ``count`` elements the latest ``next()``/``next_chunk()`` returned.

        Only where :attr:`can_unread` is true, right after that call (no other call between but
        ``unread``), and in total over several calls at most the elements it returned. Afterwards
        ``get_state()`` and the elements that follow are as if they had never been returned. A
        stage reading chunks gives back what it read past a failure, so states stay exact. The
        default (``can_unread`` False) raises ``TypeError``: read such a parent one at a time.
        """
        raise TypeError(
            f"{type(self).__name__} cannot unread (its can_unread is False): read it one element "
            "at a time, or implement unread() and set can_unread = True."
        )

    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """Returns the current position as a JSON-serialisable dict."""

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to the position ``state`` describes (a dict from ``get_state`` of this pipeline).

        The kernel's protocol, the same for every stage: (1) every value of ``state`` is checked
        against the type of its counterpart in this iterator's own ``get_state()``
        (:func:`grain_core.state.check_state_types`: ``next_index="3"``, ``3.5`` or ``True`` are
        refused); (2) :meth:`check_state` validates the stage's declared fields, without changing
        anything; (3) :meth:`restore_state` moves the iterator. If (3) raises, the iterator is
        put back where it was, so a refused state leaves every stage untouched: it then emits
        exactly what it would have. Stages implement :meth:`check_state` / :meth:`restore_state`;
        a subclass that overrides ``set_state`` itself (Grain style) gets (1) and the rollback too.
        """
        if (
            type(self).restore_state is DatasetIterator.restore_state
            and type(self).set_state is not DatasetIterator.set_state
        ):
            return  # a Grain-style set_state calling super(): the base has nothing to restore
        self.check_state(state)
        self.restore_state(state)

    def state_fields(self) -> Mapping[str, StateField] | None:
        """The fields of this stage's state and how to validate them (``None``: not declared).

        A stage returns ``{name: StateField...}`` for every field its ``get_state()`` returns
        besides ``kind``; :meth:`check_state` then refuses a state whose fields are missing, of the
        wrong type, out of range, or (identity fields) different from this pipeline's, before
        anything changes. See :class:`grain_core.state.StateField`.
        """
        return None

    @property
    def state_kind(self) -> str:
        """The ``kind`` this stage's states carry: the ``kind`` attribute, else the class name."""
        return getattr(self, "kind", "") or type(self).__name__

    def check_state(self, state: Any) -> None:
        """Raises if ``state`` does not fit this iterator; never changes anything.

        The default checks the fields :meth:`state_fields` declares (parent fields with the
        parents' own ``check_state``). Override it (calling ``super()``) for checks between fields
        (``turn < cycle_length``); checks that need data (replaying a window) belong in
        :meth:`restore_state`, which is rolled back when it raises.
        """
        fields = self.state_fields()
        if fields is None:
            return
        parents = self._parents

        def check_parent(index: int, sub: Any) -> None:
            if sub is not None:
                parents[index].check_state(sub)

        _state.check_state_fields(
            state, self.state_kind, fields, self.get_state(), check_parent=check_parent
        )

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Moves this iterator (and its parents) to ``state``, already checked by
        :meth:`check_state`. Stages implement this; the kernel's :meth:`set_state` calls it and rolls
        it back if it raises."""
        raise NotImplementedError(
            f"{type(self).__name__} implements neither restore_state nor set_state."
        )

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("set_state")
        if own is not None and not getattr(own, "_grain_atomic", False):
            cls.set_state = atomic_set_state(own)  # type: ignore[method-assign,assignment]
        guard_class(cls, _GUARDED)  # one thread at a time (grain_core.dataset.concurrency)

    @property
    def stats_recorder(self) -> Any:
        """The statistics hook: ``None``, or the recorder that :mod:`grain_core.stats` sets on the
        iterators of a pipeline it measures. The kernel's wrapper of every ``__next__`` /
        ``next_chunk`` (:mod:`grain_core.dataset.concurrency`) times the outermost call through it,
        so every stage is measured without code of its own (and an unmeasured iterator pays
        nothing); a stage never sets or reads it."""
        return stats_recorder(self)

    @stats_recorder.setter
    def stats_recorder(self, recorder: Any) -> None:
        set_stats_recorder(self, recorder)

    def buffer_fill(self) -> float | None:
        """Statistics hook: the fraction (0 to 1) of this iterator's read-ahead buffer that holds
        elements now, or ``None`` (the default) for a stage without one. :mod:`grain_core.stats`
        samples it before each element (``StageStats.buffer_fill`` is the mean); it must be cheap,
        never block and change nothing."""
        return None

    def worker_stats(self) -> list[Any] | None:
        """Statistics hook of a stage whose parents run elsewhere (``mp_prefetch``): the latest
        report of each worker (``None`` for one that has not reported), from iterators built with
        :func:`grain_core.stats.worker_iterator`; ``None`` (the default) when its parents are
        measured here. :mod:`grain_core.stats` shows the reports under this stage."""
        return None

    def start_prefetch(self) -> None:
        """Starts producing elements in the background, where the iterator can (else a no-op)."""
        for p in self._parents:
            p.start_prefetch()

    def close(self) -> None:
        """Releases threads, processes and files this iterator holds. Idempotent."""
        self._closed = True
        for p in self._parents:
            p.close()

    def __enter__(self) -> DatasetIterator[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def options(self) -> DatasetOptions | None:
        """The pipeline-wide ``DatasetOptions`` applied to this iterator, or ``None``."""
        return self._options

    def apply_options(self, options: DatasetOptions) -> None:
        """Applies pipeline-wide options to this iterator and everything upstream of it.

        The kernel calls it on the iterator below ``with_options``; it merges ``options`` into
        :attr:`options` and calls it on every parent. A stage that opens iterators which are not
        its parents (one per file, say) calls ``it.apply_options(self.options)`` on each when
        :attr:`options` is set, and overrides this method (calling ``super()``) to pass later
        options on to the ones already open.
        """
        self._options = options.merge(self._options) if self._options else options
        for p in self._parents:
            p.apply_options(options)

    def save(self, directory: Any) -> Coroutine[Any, Any, None]:
        """Returns a coroutine writing ``get_state()`` as of this call into ``directory``.

        The state is captured before returning (not when the coroutine runs), as Orbax expects.
        """
        return checkpoint_io.save_iterator_state(self, directory)

    async def load(self, directory: Any) -> None:
        """Reads a state written by :meth:`save` from ``directory`` and sets it."""
        await checkpoint_io.load_iterator_state(self, directory)


class CheckpointIO(StageTable):
    """What ``DatasetIterator.save`` / ``load`` call: ``grain_core.checkpoint``'s file functions,
    filled by ``grain_core._wiring`` (the checkpoint package sits above the dataset kernel;
    :mod:`grain_core.dataset.locator`)."""

    save_iterator_state: Callable[[DatasetIterator[Any], Any], Coroutine[Any, Any, None]]
    load_iterator_state: Callable[[DatasetIterator[Any], Any], Coroutine[Any, Any, None]]


#: The one :class:`CheckpointIO` table.
checkpoint_io = CheckpointIO()

DatasetIterator.set_state = atomic_set_state(DatasetIterator.set_state)  # type: ignore[method-assign,assignment]
_GUARDED = ("__next__", "next_chunk", "get_state", "set_state")
guard_class(DatasetIterator, _GUARDED)
