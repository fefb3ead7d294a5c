"""The dataset protocols ``MapDataset`` and ``IterDataset`` (``DatasetIterator``, the iterator they
return, lives in :mod:`grain_core.dataset.iterator`).

``MapDataset`` is a lazy, immutable, infinite ``Sequence``: ``len`` is one epoch, ``ds[i]`` for
``i >= len`` reads later epochs, ``ds.__getitems__(indices)`` reads many indices at once and may return
``None`` for missing (filtered) elements. ``IterDataset`` is a lazy ``Iterable`` whose ``__iter__``
returns a checkpointable ``DatasetIterator``.

Transformations are methods returning new datasets; their implementations live in sibling modules
(and, for ``mp_prefetch``, in the runtime layer above), which import this module. This module never
imports them: it declares each builder, typed, in the :class:`StageBuilders` table :data:`builders`, which
``grain_core.dataset`` and ``grain_core._wiring`` fill (:mod:`grain_core.dataset.locator`,
``docs/architecture.md``). Plugin-provided
factories (``MapDataset.range``) resolve through the metaclasses. Seeds follow the lineage
:mod:`grain_core.dataset.seed_lineage` records.
"""

from __future__ import annotations

import abc
import inspect
import operator
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

from grain_core import seeds as _seeds
from grain_core.dataset.describe import describe
from grain_core.dataset.grain_attrs import DatasetAttrs, route_getitems
from grain_core.dataset.iterator import DatasetIterator
from grain_core.dataset.locator import StageTable, user_iter
from grain_core.dataset.seed_lineage import SeedLineage, fallback_seed
from grain_core.suggest import did_you_mean
from grain_core.validation import check_instance

if TYPE_CHECKING:
    import numpy as np

    from grain_core import transforms as tr
    from grain_core.options import MultiprocessingOptions, ReadOptions
    from grain_core.transforms import DatasetSelectionMap

T = TypeVar("T")
S = TypeVar("S")
T_co = TypeVar("T_co", covariant=True)


class Indexable(Protocol[T_co]):
    """What ``MapDataset.source`` reads: ``len`` and ``[i]`` (a ``Sequence``, a data source)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> T_co: ...


def _inferred_element_spec() -> Any:
    """The ``_element_spec`` property every dataset inherits (an override is another object)."""
    return _DatasetBase.__dict__["_element_spec"]


__all__ = ["MapDataset", "IterDataset", "DatasetIterator"]


def _as_parents(parents: Any) -> tuple[Any, ...]:
    if isinstance(parents, (MapDataset, IterDataset)):
        return (parents,)
    return tuple(parents)


class _DatasetBase(DatasetAttrs):  # Grain's private attributes: dataset/grain_attrs.py
    _lineage: SeedLineage

    def __init__(self, parents: Any = ()):
        self._parents = _as_parents(parents)
        for p in self._parents:
            check_instance(
                p,
                (MapDataset, IterDataset),
                f"{type(self).__name__} parents",
                expected="MapDataset or IterDataset",
            )
        self._lineage = SeedLineage.below(self._parents)

    @property
    def parents(self) -> Sequence[Any]:
        """The datasets this one reads from."""
        return self._parents

    @property
    def _element_spec(self) -> Any:
        """Grain's hook: the spec of this dataset's elements, inferred stage by stage
        (``grain_core.element_spec``). A subclass may override it, as in Grain."""
        return builders.infer_element_spec(self)

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
        return fallback_seed(self._lineage)

    def pipe(self, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Returns ``func(self, *args, **kwargs)``: chains transformations that are not methods."""
        return func(self, *args, **kwargs)

    def __repr__(self) -> str:
        return describe(self)


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

    def source(cls, source: Indexable[T]) -> MapDataset[T]:
        """Returns a dataset over ``source``: any ``Sequence`` or ``RandomAccessDataSource``."""
        return builders.SourceMapDataset(source)

    def concatenate(cls, datasets: Sequence[MapDataset[T]]) -> MapDataset[T]:
        """Returns the elements of ``datasets`` one after another (epoch ``n`` of each)."""
        return builders.ConcatenateMapDataset(datasets)

    def mix(
        cls, datasets: Sequence[MapDataset[T]], weights: Sequence[float] | None = None
    ) -> MapDataset[T]:
        """Returns ``datasets`` interleaved in proportion to ``weights`` (uniform by default)."""
        return builders.MixedMapDataset(datasets, weights)

    def select_from_datasets(
        cls, datasets: Sequence[MapDataset[T]], selection_map: DatasetSelectionMap
    ) -> MapDataset[T]:
        """Returns a dataset whose index ``i`` is ``datasets[d][j]`` for ``(d, j) = selection_map[i]``."""
        return builders.SelectionMapDataset(datasets, selection_map)

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
    #: ``map_with_index``, ``seed``. Elastic restore (``grain_core.dataset.elastic``) relies on it.
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
        if "__getitem__" in cls.__dict__ and "element_at" not in cls.__dict__:
            # A Grain-style subclass implements __getitem__: it is also its element hook, so the
            # stages reading it (parent.element_at(i)) call it directly.
            cls.element_at = cls.__dict__["__getitem__"]  # type: ignore[method-assign]

    def element_at(self, index: int) -> T | None:
        """Returns the element at a non-negative ``index``; the element hook of a map stage.

        ``index >= len(self)`` reads a later epoch (``index // len`` is the epoch); ``None`` means
        the element is missing (filtered). A stage implements this for one index and may override
        :meth:`__getitems__` for many; it reads its parent with ``parent.element_at(i)`` or
        ``parent.__getitems__(indices)``. ``ds[i]`` (which also takes negative ints and slices)
        calls it. Grain-style subclasses may implement ``__getitem__`` instead.
        """
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
        return self.element_at(i)

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[T | None]:
        """Returns the elements at non-negative ``indices`` in order (``None`` where missing).

        Transformations override this to work on the whole index array at once; sources that
        define ``__getitems__`` are read in bulk.
        """
        get = self.element_at
        return [get(int(i)) for i in indices]

    @user_iter
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

    # --- transformations -------------------------------------------------------------------------

    def seed(self, seed: int) -> MapDataset[T]:
        """Returns this dataset with ``seed`` as the pipeline seed for downstream transformations."""
        return builders.SeedMapDataset(self, seed)

    def shuffle(self, seed: int | None = None) -> MapDataset[T]:
        """Returns the same elements globally shuffled, differently in every epoch."""
        return builders.ShuffleMapDataset(self, seed=seed)

    def slice(self, sl: slice) -> MapDataset[T]:
        """Returns the elements at the positions of ``sl`` (``ds[a:b:c]`` is the same)."""
        return builders.SliceMapDataset(self, sl)

    @overload
    def map(self, transform: Callable[[T], S]) -> MapDataset[S]: ...

    @overload
    def map(self, transform: tr.Map) -> MapDataset[Any]: ...

    def map(self, transform: Any) -> MapDataset[Any]:
        """Returns elements passed through ``transform`` (a ``Map`` or a callable)."""
        return builders.MapMapDataset(self, transform)

    @overload
    def random_map(
        self, transform: Callable[[T, np.random.Generator], S], *, seed: int | None = None
    ) -> MapDataset[S]: ...

    @overload
    def random_map(self, transform: tr.RandomMap, *, seed: int | None = None) -> MapDataset[Any]: ...

    def random_map(self, transform: Any, *, seed: int | None = None) -> MapDataset[Any]:
        """Returns elements passed through ``transform(x, rng)``, ``rng`` a pure function of
        (seed, index)."""
        return builders.RandomMapMapDataset(self, transform, seed=seed)

    @overload
    def map_with_index(self, transform: Callable[[int, T], S]) -> MapDataset[S]: ...

    @overload
    def map_with_index(self, transform: tr.MapWithIndex) -> MapDataset[Any]: ...

    def map_with_index(self, transform: Any) -> MapDataset[Any]:
        """Returns ``transform(index, element)`` for each element."""
        return builders.MapWithIndexMapDataset(self, transform)

    def filter(self, transform: tr.Filter | Callable[[T], Any]) -> MapDataset[T]:
        """Returns the dataset with ``None`` where ``transform(element)`` is false."""
        return builders.FilterMapDataset(self, transform)

    @overload
    def batch(
        self, batch_size: int, *, drop_remainder: bool = False, batch_fn: None = None
    ) -> MapDataset[Any]: ...

    @overload
    def batch(
        self, batch_size: int, *, drop_remainder: bool = False, batch_fn: Callable[[Sequence[T]], S]
    ) -> MapDataset[S]: ...

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> MapDataset[Any]:
        """Returns consecutive elements of each epoch grouped by ``batch_size``, stacked leafwise."""
        return builders.BatchMapDataset(self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def repeat(
        self, num_epochs: int | None = None, *, reseed_each_epoch: bool = True
    ) -> MapDataset[T]:
        """Returns ``num_epochs`` epochs back to back; ``None`` repeats forever
        (``len == sys.maxsize``). With ``reseed_each_epoch=False`` every epoch repeats the first
        epoch's elements (upstream shuffles and random maps are not re-drawn per epoch)."""
        return builders.RepeatMapDataset(self, num_epochs, reseed_each_epoch=reseed_each_epoch)

    def apply(self, transformations: Any) -> MapDataset[Any]:
        """Applies one transform object or a sequence of them (``Map``, ``Filter``, ``Batch``, ...)."""
        return builders.apply_transformations(self, transformations)

    def to_iter_dataset(
        self, read_options: ReadOptions | None = None, *, allow_nones: bool = False
    ) -> IterDataset[T]:
        """Returns an ``IterDataset`` over this dataset, read ahead by ``read_options`` threads."""
        return builders.PrefetchIterDataset(self, read_options=read_options, allow_nones=allow_nones)


class IterDatasetMeta(abc.ABCMeta):
    """Metaclass holding ``IterDataset``'s factories; plugin factories resolve here by name."""

    def mix(
        cls,
        datasets: Sequence[IterDataset[T]] | Mapping[str, IterDataset[T]],
        weights: Sequence[float] | Mapping[str, float] | None = None,
    ) -> IterDataset[T]:
        """Returns ``datasets`` interleaved by ``weights``; stops when any input is exhausted."""
        return builders.MixedIterDataset(datasets, weights)

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
            cls.__iter__ = user_iter(own)  # type: ignore[method-assign]

    def __init__(self, parents: Any = ()):
        super().__init__(parents)

    @abc.abstractmethod
    def __iter__(self) -> DatasetIterator[T]:
        """Returns a new iterator positioned at the start."""

    def seed(self, seed: int) -> IterDataset[T]:
        """Returns this dataset with ``seed`` as the pipeline seed for downstream transformations."""
        return builders.SeedIterDataset(self, seed)

    @overload
    def map(self, transform: Callable[[T], S]) -> IterDataset[S]: ...

    @overload
    def map(self, transform: tr.Map) -> IterDataset[Any]: ...

    def map(self, transform: Any) -> IterDataset[Any]:
        """Returns elements passed through ``transform`` (a ``Map`` or a callable)."""
        return builders.MapIterDataset(self, transform)

    @overload
    def random_map(
        self, transform: Callable[[T, np.random.Generator], S], *, seed: int | None = None
    ) -> IterDataset[S]: ...

    @overload
    def random_map(self, transform: tr.RandomMap, *, seed: int | None = None) -> IterDataset[Any]: ...

    def random_map(self, transform: Any, *, seed: int | None = None) -> IterDataset[Any]:
        """Returns ``transform(x, rng)``, ``rng`` a pure function of (seed, element count)."""
        return builders.RandomMapIterDataset(self, transform, seed=seed)

    @overload
    def map_with_index(self, transform: Callable[[int, T], S]) -> IterDataset[S]: ...

    @overload
    def map_with_index(self, transform: tr.MapWithIndex) -> IterDataset[Any]: ...

    def map_with_index(self, transform: Any) -> IterDataset[Any]:
        """Returns ``transform(i, element)`` where ``i`` counts elements from 0."""
        return builders.MapWithIndexIterDataset(self, transform)

    def filter(self, transform: tr.Filter | Callable[[T], Any]) -> IterDataset[T]:
        """Returns only the elements for which ``transform(element)`` is true."""
        return builders.FilterIterDataset(self, transform)

    @overload
    def batch(
        self, batch_size: int, *, drop_remainder: bool = False, batch_fn: None = None
    ) -> IterDataset[Any]: ...

    @overload
    def batch(
        self, batch_size: int, *, drop_remainder: bool = False, batch_fn: Callable[[Sequence[T]], S]
    ) -> IterDataset[S]: ...

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> IterDataset[Any]:
        """Returns consecutive elements grouped by ``batch_size``, stacked leafwise."""
        return builders.BatchIterDataset(self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def apply(self, transformations: Any) -> IterDataset[Any]:
        """Applies one transform object or a sequence of them (``Map``, ``Filter``, ``Batch``, ...)."""
        return builders.apply_transformations(self, transformations)

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
        return builders.MultiprocessPrefetchIterDataset(
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


def infinite_length() -> int:
    """The length of an infinite ``MapDataset`` (``sys.maxsize``)."""
    return sys.maxsize


# --- the stages the methods above build (typed wiring: grain_core.dataset.locator) --------------

AnyMap = MapDataset[Any]
AnyIter = IterDataset[Any]
D = TypeVar("D", MapDataset[Any], IterDataset[Any])


class _Seeded(Protocol[D]):
    def __call__(self, parent: D, /, *, seed: int | None) -> D: ...


class _RandomMapping(Protocol[D]):
    def __call__(self, parent: D, transform: Any, /, *, seed: int | None) -> D: ...


class _Batching(Protocol[D]):
    def __call__(
        self, parent: D, batch_size: int, /, *, drop_remainder: bool, batch_fn: Callable[[Sequence[Any]], Any] | None
    ) -> D: ...


class _Repeating(Protocol):
    def __call__(self, parent: AnyMap, num_epochs: int | None, /, *, reseed_each_epoch: bool) -> AnyMap: ...


class _Reading(Protocol):
    def __call__(self, parent: AnyMap, /, *, read_options: ReadOptions | None, allow_nones: bool) -> AnyIter: ...


class _Applying(Protocol):
    def __call__(self, ds: D, transformations: Any, /) -> D: ...


class _MpPrefetching(Protocol):
    def __call__(
        self,
        parent: AnyIter,
        options: MultiprocessingOptions | None,
        /,
        *,
        worker_init_fn: Callable[[int, int], None] | None,
        runtime: Any,
        sequential_slice: bool,
    ) -> AnyIter: ...


class StageBuilders(StageTable):
    """What the methods of ``MapDataset`` / ``IterDataset`` build, each named after its class.

    Filled by ``grain_core.dataset`` (the dataset kernel's own stages and ``apply``),
    ``grain_core.element_spec`` (``infer_element_spec``) and ``grain_core._wiring``
    (``MultiprocessPrefetchIterDataset``, from the runtime); ``tests/test_layers.py`` checks who
    fills what.
    """

    SourceMapDataset: Callable[[Any], AnyMap]
    ConcatenateMapDataset: Callable[[Sequence[AnyMap]], AnyMap]
    MixedMapDataset: Callable[[Sequence[AnyMap], Sequence[float] | None], AnyMap]
    SelectionMapDataset: Callable[[Sequence[AnyMap], DatasetSelectionMap], AnyMap]
    SeedMapDataset: Callable[[AnyMap, int], AnyMap]
    ShuffleMapDataset: _Seeded[AnyMap]
    SliceMapDataset: Callable[[AnyMap, slice], AnyMap]
    MapMapDataset: Callable[[AnyMap, Any], AnyMap]
    RandomMapMapDataset: _RandomMapping[AnyMap]
    MapWithIndexMapDataset: Callable[[AnyMap, Any], AnyMap]
    FilterMapDataset: Callable[[AnyMap, Any], AnyMap]
    BatchMapDataset: _Batching[AnyMap]
    RepeatMapDataset: _Repeating
    PrefetchIterDataset: _Reading
    MixedIterDataset: Callable[[Any, Any], AnyIter]
    SeedIterDataset: Callable[[AnyIter, int], AnyIter]
    MapIterDataset: Callable[[AnyIter, Any], AnyIter]
    RandomMapIterDataset: _RandomMapping[AnyIter]
    MapWithIndexIterDataset: Callable[[AnyIter, Any], AnyIter]
    FilterIterDataset: Callable[[AnyIter, Any], AnyIter]
    BatchIterDataset: _Batching[AnyIter]
    MultiprocessPrefetchIterDataset: _MpPrefetching
    #: ``ds.apply(transformations)``: ``grain_core.dataset.apply.apply_transformations``.
    apply_transformations: _Applying
    #: ``ds._element_spec``: ``grain_core.element_spec``'s stage-by-stage inference.
    infer_element_spec: Callable[[_DatasetBase], Any]


#: The one :class:`StageBuilders` table (``docs/architecture.md``, "Typed wiring").
builders = StageBuilders()
