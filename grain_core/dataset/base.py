"""The three dataset protocols: ``MapDataset``, ``IterDataset`` and ``DatasetIterator``.

``MapDataset`` is a lazy, immutable, infinite ``Sequence``: ``len`` is one epoch, ``ds[i]`` for
``i >= len`` reads later epochs, ``ds.__getitems__(indices)`` reads many indices at once and may return
``None`` for missing (filtered) elements. ``IterDataset`` is a lazy ``Iterable`` whose ``__iter__``
returns a checkpointable ``DatasetIterator``.

Transformations are methods returning new datasets; their implementations live in sibling modules
(and, for ``mp_prefetch`` and ``save``/``load``, in the runtime and checkpoint layers above), which
import this module. This module never imports them: they install themselves into :data:`installed`
(see ``docs/architecture.md``). Plugin-provided factories (``MapDataset.range``) resolve through the
metaclass.
"""

from __future__ import annotations

import abc
import functools
import inspect
import json
import operator
import sys
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from grain_core import grain_states as _grain_states
from grain_core import seeds as _seeds
from grain_core import state as _state
from grain_core.dataset.concurrency import guard_class
from grain_core.dataset.grain_attrs import DatasetAttrs, IteratorAttrs, route_getitems
from grain_core.state import StateField
from grain_core.suggest import did_you_mean
from grain_core.validation import check_instance

if TYPE_CHECKING:
    import numpy as np

    from grain_core.options import DatasetOptions, MultiprocessingOptions, ReadOptions
    from grain_core.transforms import DatasetSelectionMap

T = TypeVar("T")
S = TypeVar("S")


class _Installed:
    """The stage classes and functions this module's methods build, installed by the modules that
    define them: ``grain_core.dataset`` installs its own stages, ``grain_core._wiring`` the runtime's
    and checkpoint's. Importing ``grain_core`` (or any of its modules) installs all of them, so the
    dependency points up only at run time, never as an import."""

    def install(self, **implementations: Any) -> None:
        vars(self).update(implementations)

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            f"grain_core's {name} is not installed: import grain_core (not grain_core.dataset.base "
            "alone, e.g. from a file path) to wire the kernel's layers together."
        )


installed = _Installed()


_iter_local = threading.local()


def _user_iter(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Wraps a dataset class's ``__iter__`` so Grain's debug options (``grain_core.debug``,
    installed as ``debug_iterator``) see the iterators a user creates."""

    @functools.wraps(fn)
    def __iter__(self: Any) -> Any:
        # Only module-level functions here: cloudpickle sends a class defined in __main__ with
        # its methods by value, with the globals they name (a thread-local would not pickle).
        return _call_iter(self, fn)

    __iter__._grain_core_user_iter = True  # type: ignore[attr-defined]
    return __iter__


def _call_iter(ds: Any, fn: Callable[[Any], Any]) -> Any:
    hook = installed.__dict__.get("debug_iterator")
    if hook is None or getattr(_iter_local, "inside", False):
        return fn(ds)
    return hook(ds, fn, _iter_local)


def _inferred_element_spec() -> Any:
    """The ``_element_spec`` property every dataset inherits (an override is another object)."""
    return _DatasetBase.__dict__["_element_spec"]


__all__ = ["MapDataset", "IterDataset", "DatasetIterator", "stage_descriptions"]

_DEFAULT_BASE_SEED = 0


def _as_parents(parents: Any) -> tuple[Any, ...]:
    if isinstance(parents, (MapDataset, IterDataset)):
        return (parents,)
    return tuple(parents)


class _SeedLineage:
    """Where a dataset sits below ``seed()`` calls: the pipeline seeds it sees and its depth."""

    __slots__ = ("seeds", "depth")

    def __init__(self, seeds: tuple[int, ...], depth: int):
        self.seeds = seeds
        self.depth = depth

    @classmethod
    def below(cls, parents: Sequence[Any]) -> _SeedLineage:
        seeds: list[int] = []
        depth = 0
        for p in parents:
            lin = getattr(p, "_lineage", None)
            if lin is None:
                continue
            for s in lin.seeds:
                if s not in seeds:
                    seeds.append(s)
            depth = max(depth, lin.depth + 1)
        return cls(tuple(seeds), depth)


class _DatasetBase(DatasetAttrs):  # Grain's private attributes: dataset/grain_attrs.py
    _lineage: _SeedLineage

    def __init__(self, parents: Any = ()):
        self._parents = _as_parents(parents)
        for p in self._parents:
            check_instance(
                p,
                (MapDataset, IterDataset),
                f"{type(self).__name__} parents",
                expected="MapDataset or IterDataset",
            )
        self._lineage = _SeedLineage.below(self._parents)

    @property
    def parents(self) -> Sequence[Any]:
        """The datasets this one reads from."""
        return self._parents

    @property
    def _element_spec(self) -> Any:
        """Grain's hook: the spec of this dataset's elements, inferred stage by stage
        (``grain_core.element_spec``). A subclass may override it, as in Grain."""
        return installed.infer_element_spec(self)

    @property
    def _default_seed(self) -> int | None:
        """The seed a random transformation placed here derives from ``seed()`` upstream, or None
        (Grain's derivation: ``grain_core.seeds.default_seed``)."""
        return _seeds.default_seed(self)

    def resolve_seed(self, seed: int | None, *, bounded: bool = True) -> int:
        """The seed a random stage uses: ``seed`` if given, else the one derived from ``seed()``
        upstream, else a fixed default (the seed contract, ``docs/contracts.md``).

        A random stage calls this once in ``__init__`` with its ``seed=`` argument (after
        ``super().__init__(parents)``) and keeps the result; that call is its declared seed use.
        Raises ``TypeError`` / ``ValueError`` for a seed Grain refuses (negative, or, when
        ``bounded``, at least ``2**32``).
        """
        if seed is not None:
            return _seeds.validate_seed(seed, bounded=bounded)
        derived = self._default_seed
        if derived is not None:
            return derived
        return _seeds.derive_seed((_DEFAULT_BASE_SEED,), self._lineage.depth)

    def _resolve_seed(self, seed: int | None) -> int:
        """Kernel-internal alias of :meth:`resolve_seed`."""
        return self.resolve_seed(seed)

    def pipe(self, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Returns ``func(self, *args, **kwargs)``: chains transformations that are not methods."""
        return func(self, *args, **kwargs)

    def __repr__(self) -> str:
        return installed.describe(self)


def _plugin_factory(cls: type, name: str) -> Any:
    """``cls.name`` registered by a plugin (``MapDataset.range``); a miss suggests the closest name."""
    from grain_core.plugins import registry

    try:
        return registry.dataset_factory(cls.__name__, name)
    except registry.PluginNameError as e:
        if registry.KNOWN_PROVIDERS.get(name) is not None:
            raise
        raise registry.PluginNameError(f"{e}{did_you_mean(name, [*dir(cls), *dir(type(cls))])}") from None


class MapDatasetMeta(abc.ABCMeta):
    """Metaclass holding ``MapDataset``'s factories; plugin factories resolve here by name."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        ds = super().__call__(*args, **kwargs)
        # The construction, so mp_prefetch(sequential_slice=True) can build the stage again over a
        # slice of its sources (grain_core.dataset.sequential).
        try:
            ds._constructor_call = (args, kwargs)
        except AttributeError:  # a stage with __slots__: sequential_slice refuses it
            pass
        return ds

    @property
    def __signature__(cls) -> inspect.Signature:
        """The constructor's parameters (what ``inspect.signature(SomeMapDataset)`` shows), not
        the ``(*args, **kwargs)`` of this metaclass's ``__call__``."""
        init = inspect.signature(cls.__init__)  # type: ignore[misc]  # the class's own constructor
        return init.replace(parameters=list(init.parameters.values())[1:])

    def source(cls, source: Any) -> MapDataset:
        """Returns a dataset over ``source``: any ``Sequence`` or ``RandomAccessDataSource``."""
        return installed.SourceMapDataset(source)

    def concatenate(cls, datasets: Sequence[MapDataset]) -> MapDataset:
        """Returns the elements of ``datasets`` one after another (epoch ``n`` of each)."""
        return installed.ConcatenateMapDataset(datasets)

    def mix(cls, datasets: Sequence[MapDataset], weights: Sequence[float] | None = None) -> MapDataset:
        """Returns ``datasets`` interleaved in proportion to ``weights`` (uniform by default)."""
        return installed.MixedMapDataset(datasets, weights)

    def select_from_datasets(
        cls, datasets: Sequence[MapDataset], selection_map: DatasetSelectionMap
    ) -> MapDataset:
        """Returns a dataset whose index ``i`` is ``datasets[d][j]`` for ``(d, j) = selection_map[i]``."""
        return installed.SelectionMapDataset(datasets, selection_map)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _plugin_factory(cls, name)

    def __dir__(cls) -> list[str]:
        from grain_core.plugins import registry

        return sorted(set(super().__dir__()) | set(registry.factory_names(cls.__name__)))


class MapDataset(_DatasetBase, Generic[T], metaclass=MapDatasetMeta):
    """A lazy random-access dataset; see the module docstring for the contract."""

    #: True for index-preserving stages (one parent, same length, element ``i`` made from the
    #: parent's element ``i`` only, never ``None`` for a present element): ``map``, ``random_map``,
    #: ``map_with_index``, ``seed``. Elastic restore (``grain_core.runtime.elastic``) relies on it.
    one_to_one: bool = False

    def __init__(self, parents: MapDataset | Sequence[MapDataset] = ()):
        super().__init__(parents)

    @abc.abstractmethod
    def __len__(self) -> int:
        """Length of one epoch."""

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "_getitems" in cls.__dict__ and "__getitems__" not in cls.__dict__:
            cls.__getitems__ = route_getitems(cls.__dict__["_getitems"])  # type: ignore[method-assign,assignment]
        if "_getitem" in cls.__dict__:
            return
        if "element_at" in cls.__dict__:
            # The public element hook: the kernel's internal fast path calls it directly.
            cls._getitem = cls.__dict__["element_at"]  # type: ignore[method-assign]
        elif "__getitem__" in cls.__dict__:
            # Grain-style subclasses implement __getitem__ directly; route the kernel's calls to it.
            user_getitem = cls.__dict__["__getitem__"]

            def _getitem(self, index: int, _get=user_getitem):
                return _get(self, index)

            cls._getitem = _getitem  # type: ignore[method-assign]

    def element_at(self, index: int) -> T | None:
        """Returns the element at a non-negative ``index``; the element hook of a map stage.

        ``index >= len(self)`` reads a later epoch (``index // len`` is the epoch); ``None`` means
        the element is missing (filtered). A stage implements this for one index and may override
        :meth:`__getitems__` for many; it reads its parent with ``parent.element_at(i)`` or
        ``parent.__getitems__(indices)``. ``ds[i]`` (which also takes negative ints and slices)
        calls it. Grain-style subclasses may implement ``__getitem__`` instead.
        """
        return self._getitem(index)

    def _getitem(self, index: int) -> T | None:
        """Kernel-internal element access (see :meth:`element_at`)."""
        raise NotImplementedError(
            f"{type(self).__name__} implements neither element_at nor __getitem__."
        )

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        if isinstance(index, bool):
            raise TypeError("MapDataset indices must be integers or slices, got bool.")
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(
                f"MapDataset indices must be integers or slices, got {type(index).__name__}."
            ) from None
        if i < 0:
            n = len(self)
            if i < -n:
                raise IndexError(f"index {i} out of range for a dataset of length {n}.")
            i += n
        return self._getitem(i)

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[T | None]:
        """Returns the elements at non-negative ``indices`` in order (``None`` where missing).

        Transformations override this to work on the whole index array at once; sources that
        define ``__getitems__`` are read in bulk.
        """
        get = self._getitem
        return [get(int(i)) for i in indices]

    @_user_iter
    def __iter__(self) -> DatasetIterator[T]:
        return self.to_iter_dataset().__iter__()

    def fingerprint_fields(self) -> Mapping[str, Any]:
        """What, besides its class and length, identifies this stage in iterator states.

        Returns named values (``{"window_size": 8, "seed": 3}``) with a deterministic ``repr``:
        the kernel digests them into the fingerprint of the ``MapDataset`` chain that a
        ``to_iter_dataset`` state records, so a state saved with other values is refused. Stages
        whose output depends on a seed or a size list them here; the default is none.
        """
        return {}

    def _fingerprint_fields(self) -> tuple[Any, ...]:
        """Kernel-internal: the values of :meth:`fingerprint_fields`, in order."""
        return tuple(self.fingerprint_fields().values())

    # --- transformations -------------------------------------------------------------------------

    def seed(self, seed: int) -> MapDataset[T]:
        """Returns this dataset with ``seed`` as the pipeline seed for downstream transformations."""
        return installed.SeedMapDataset(self, seed)

    def shuffle(self, seed: int | None = None) -> MapDataset[T]:
        """Returns the same elements globally shuffled, differently in every epoch."""
        return installed.ShuffleMapDataset(self, seed=seed)

    def slice(self, sl: slice) -> MapDataset[T]:
        """Returns the elements at the positions of ``sl`` (``ds[a:b:c]`` is the same)."""
        return installed.SliceMapDataset(self, sl)

    def map(self, transform: Any) -> MapDataset:
        """Returns elements passed through ``transform`` (a ``Map`` or a callable)."""
        return installed.MapMapDataset(self, transform)

    def random_map(self, transform: Any, *, seed: int | None = None) -> MapDataset:
        """Returns elements passed through ``transform(x, rng)``, ``rng`` a pure function of
        (seed, index)."""
        return installed.RandomMapMapDataset(self, transform, seed=seed)

    def map_with_index(self, transform: Any) -> MapDataset:
        """Returns ``transform(index, element)`` for each element."""
        return installed.MapWithIndexMapDataset(self, transform)

    def filter(self, transform: Any) -> MapDataset[T]:
        """Returns the dataset with ``None`` where ``transform(element)`` is false."""
        return installed.FilterMapDataset(self, transform)

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> MapDataset[S]:
        """Returns consecutive elements of each epoch grouped by ``batch_size``, stacked leafwise."""
        return installed.BatchMapDataset(self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def repeat(
        self, num_epochs: int | None = None, *, reseed_each_epoch: bool = True
    ) -> MapDataset[T]:
        """Returns ``num_epochs`` epochs back to back; ``None`` repeats forever
        (``len == sys.maxsize``). With ``reseed_each_epoch=False`` every epoch repeats the first
        epoch's elements (upstream shuffles and random maps are not re-drawn per epoch)."""
        return installed.RepeatMapDataset(self, num_epochs, reseed_each_epoch=reseed_each_epoch)

    def apply(self, transformations: Any) -> MapDataset:
        """Applies one transform object or a sequence of them (``Map``, ``Filter``, ``Batch``, ...)."""
        return installed.apply_transformations(self, transformations)

    def to_iter_dataset(
        self, read_options: ReadOptions | None = None, *, allow_nones: bool = False
    ) -> IterDataset[T]:
        """Returns an ``IterDataset`` over this dataset, read ahead by ``read_options`` threads."""
        return installed.PrefetchIterDataset(self, read_options=read_options, allow_nones=allow_nones)


class IterDatasetMeta(abc.ABCMeta):
    """Metaclass holding ``IterDataset``'s factories; plugin factories resolve here by name."""

    def mix(
        cls,
        datasets: Sequence[IterDataset] | Mapping[str, IterDataset],
        weights: Sequence[float] | Mapping[str, float] | None = None,
    ) -> IterDataset:
        """Returns ``datasets`` interleaved by ``weights``; stops when any input is exhausted."""
        return installed.MixedIterDataset(datasets, weights)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _plugin_factory(cls, name)

    def __dir__(cls) -> list[str]:
        from grain_core.plugins import registry

        return sorted(set(super().__dir__()) | set(registry.factory_names(cls.__name__)))


class IterDataset(_DatasetBase, Iterable[T], metaclass=IterDatasetMeta):
    """A lazy iterable dataset; ``iter(ds)`` returns a checkpointable ``DatasetIterator``."""

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__iter__")
        if own is not None and not getattr(own, "_grain_core_user_iter", False):
            cls.__iter__ = _user_iter(own)  # type: ignore[method-assign]

    def __init__(self, parents: Any = ()):
        super().__init__(parents)

    @abc.abstractmethod
    def __iter__(self) -> DatasetIterator[T]:
        """Returns a new iterator positioned at the start."""

    def seed(self, seed: int) -> IterDataset[T]:
        """Returns this dataset with ``seed`` as the pipeline seed for downstream transformations."""
        return installed.SeedIterDataset(self, seed)

    def map(self, transform: Any) -> IterDataset:
        """Returns elements passed through ``transform`` (a ``Map`` or a callable)."""
        return installed.MapIterDataset(self, transform)

    def random_map(self, transform: Any, *, seed: int | None = None) -> IterDataset:
        """Returns ``transform(x, rng)``, ``rng`` a pure function of (seed, element count)."""
        return installed.RandomMapIterDataset(self, transform, seed=seed)

    def map_with_index(self, transform: Any) -> IterDataset:
        """Returns ``transform(i, element)`` where ``i`` counts elements from 0."""
        return installed.MapWithIndexIterDataset(self, transform)

    def filter(self, transform: Any) -> IterDataset[T]:
        """Returns only the elements for which ``transform(element)`` is true."""
        return installed.FilterIterDataset(self, transform)

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> IterDataset[S]:
        """Returns consecutive elements grouped by ``batch_size``, stacked leafwise."""
        return installed.BatchIterDataset(self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def apply(self, transformations: Any) -> IterDataset:
        """Applies one transform object or a sequence of them (``Map``, ``Filter``, ``Batch``, ...)."""
        return installed.apply_transformations(self, transformations)

    def mp_prefetch(
        self,
        options: MultiprocessingOptions | None = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
        sequential_slice: bool = False,
        runtime: Any = None,
    ) -> IterDataset[T]:
        """Returns this dataset produced by ``options.num_workers`` workers.

        Each worker runs the pipeline over its slice of the ``MapDataset`` stage; the output order
        depends only on the pipeline and the worker count. Without ``options``: 10 workers, capped
        at the number of CPUs. Workers read strided slices of the ``MapDataset`` stage (worker ``i``
        reads indices ``i::num_workers``); with ``sequential_slice=True`` (Grain's option) each
        worker reads a contiguous block of the sources instead, and the stages up to
        ``to_iter_dataset`` (a shuffle included) run over that block
        (:mod:`grain_core.dataset.sequential`). ``runtime``
        picks where workers run: a runtime object or a registered runtime name (default
        ``"processes"``: local processes; see ``docs/runtime.md``).
        """
        return installed.MultiprocessPrefetchIterDataset(
            self, options, worker_init_fn=worker_init_fn, runtime=runtime,
            sequential_slice=sequential_slice,
        )

    def prefetch(self, multiprocessing_options: MultiprocessingOptions) -> IterDataset[T]:
        """Deprecated alias of :meth:`mp_prefetch`."""
        import warnings

        warnings.warn(
            "IterDataset.prefetch is deprecated; use mp_prefetch.", DeprecationWarning, stacklevel=2
        )
        return self.mp_prefetch(multiprocessing_options)


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
    #: identifying (a seed). Elastic restore (``grain_core.runtime.elastic``) relies on it.
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
            cls.set_state = _atomic_set_state(own)  # type: ignore[method-assign,assignment]
        guard_class(cls, _GUARDED)  # one thread at a time (grain_core.dataset.concurrency)

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

    def _apply_options(self, options: DatasetOptions) -> None:
        """Kernel-internal alias of :meth:`apply_options`."""
        self.apply_options(options)

    def save(self, directory: Any) -> Coroutine[Any, Any, None]:
        """Returns a coroutine writing ``get_state()`` as of this call into ``directory``.

        The state is captured before returning (not when the coroutine runs), as Orbax expects.
        """
        return installed.save_iterator_state(self, directory)

    async def load(self, directory: Any) -> None:
        """Reads a state written by :meth:`save` from ``directory`` and sets it."""
        await installed.load_iterator_state(self, directory)


_rollback = threading.local()


def _atomic_set_state(set_state: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """Wraps a ``set_state``: types checked first, and the iterator put back if it raises.

    Only the outermost ``set_state`` of a call tree snapshots and rolls back (its rollback restores
    every stage below it), so a chain of ``n`` stages costs one extra ``get_state``, not ``n``.
    """

    @functools.wraps(set_state)
    def atomic(self: DatasetIterator, state: Any) -> None:
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

    atomic._grain_atomic = True  # type: ignore[attr-defined]
    return atomic


DatasetIterator.set_state = _atomic_set_state(DatasetIterator.set_state)  # type: ignore[method-assign,assignment]
_GUARDED = ("__next__", "next_chunk", "get_state", "set_state")
guard_class(DatasetIterator, _GUARDED)


def _describe_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else repr(value)
    if len(text) > 120:  # a long source description: a readable head and a digest of the rest
        text = f"{text[:100]}...{_state.fingerprint(text)}"
    return text


def stage_descriptions(ds: MapDataset) -> list[str]:
    """One JSON string per stage of ``ds``'s ``MapDataset`` chain, ``ds`` first, depth first:
    ``{"stage": class name, "length": len (-1: infinite), **fingerprint_fields()}``.

    A ``to_iter_dataset`` state records these next to its fingerprint, so that a refused state says
    which field of which stage differs (:func:`grain_core.state.explain_stage_difference`).
    Strings, so that :func:`grain_core.state.check_same_pipeline` never compares them itself.
    """
    out: list[str] = []

    def visit(d: MapDataset) -> None:
        n = len(d)
        entry: dict[str, Any] = {"stage": type(d).__name__, "length": -1 if n >= sys.maxsize else n}
        if type(d)._fingerprint_fields is MapDataset._fingerprint_fields:
            fields = d.fingerprint_fields()
        else:  # a kernel stage with unnamed fields
            fields = {"fields": d._fingerprint_fields()} if d._fingerprint_fields() else {}
        for key, value in fields.items():
            entry[str(key)] = _describe_value(value)
        out.append(json.dumps(entry, separators=(",", ":")))
        for p in d.parents:
            if isinstance(p, MapDataset):
                visit(p)

    visit(ds)
    return out


def infinite_length() -> int:
    """The length of an infinite ``MapDataset`` (``sys.maxsize``)."""
    return sys.maxsize
