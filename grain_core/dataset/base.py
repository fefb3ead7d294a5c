"""The three dataset protocols: ``MapDataset``, ``IterDataset`` and ``DatasetIterator``.

``MapDataset`` is a lazy, immutable, infinite ``Sequence``: ``len`` is one epoch, ``ds[i]`` for
``i >= len`` reads later epochs, ``ds.__getitems__(indices)`` reads many indices at once and may return
``None`` for missing (filtered) elements. ``IterDataset`` is a lazy ``Iterable`` whose ``__iter__``
returns a checkpointable ``DatasetIterator``.

Transformations are methods returning new datasets; their implementations live in sibling modules and
are imported on use. Plugin-provided factories (``MapDataset.range``) resolve through the metaclass.
"""

from __future__ import annotations

import abc
import operator
import sys
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from grain_core import seeds as _seeds

if TYPE_CHECKING:
    import numpy as np

    from grain_core.options import DatasetOptions, MultiprocessingOptions, ReadOptions
    from grain_core.transforms import DatasetSelectionMap

T = TypeVar("T")
S = TypeVar("S")

__all__ = ["MapDataset", "IterDataset", "DatasetIterator"]

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


class _DatasetBase:
    _lineage: _SeedLineage

    def __init__(self, parents: Any = ()):
        self._parents = _as_parents(parents)
        for p in self._parents:
            if not isinstance(p, (MapDataset, IterDataset)):
                raise TypeError(
                    f"{type(self).__name__} parents must be MapDataset or IterDataset, "
                    f"got {type(p).__name__}."
                )
        self._lineage = _SeedLineage.below(self._parents)

    @property
    def parents(self) -> Sequence[Any]:
        """The datasets this one reads from."""
        return self._parents

    @property
    def _default_seed(self) -> int | None:
        """The seed a random transformation placed here derives from ``seed()`` upstream, or None."""
        if not self._lineage.seeds:
            return None
        return _seeds.derive_seed(self._lineage.seeds, self._lineage.depth)

    def _resolve_seed(self, seed: int | None) -> int:
        """An explicit seed if given, else the derived pipeline seed, else a fixed default."""
        if seed is not None:
            return _seeds.validate_seed(seed)
        derived = self._default_seed
        if derived is not None:
            return derived
        return _seeds.derive_seed((_DEFAULT_BASE_SEED,), self._lineage.depth)

    def pipe(self, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Returns ``func(self, *args, **kwargs)``: chains transformations that are not methods."""
        return func(self, *args, **kwargs)

    def __repr__(self) -> str:
        from grain_core.dataset.describe import describe

        return describe(self)


class MapDatasetMeta(abc.ABCMeta):
    """Metaclass holding ``MapDataset``'s factories; plugin factories resolve here by name."""

    def source(cls, source: Any) -> MapDataset:
        """Returns a dataset over ``source``: any ``Sequence`` or ``RandomAccessDataSource``."""
        from grain_core.dataset.map_ops import SourceMapDataset

        return SourceMapDataset(source)

    def concatenate(cls, datasets: Sequence[MapDataset]) -> MapDataset:
        """Returns the elements of ``datasets`` one after another (epoch ``n`` of each)."""
        from grain_core.dataset.mixing import ConcatenateMapDataset

        return ConcatenateMapDataset(datasets)

    def mix(cls, datasets: Sequence[MapDataset], weights: Sequence[float] | None = None) -> MapDataset:
        """Returns ``datasets`` interleaved in proportion to ``weights`` (uniform by default)."""
        from grain_core.dataset.mixing import MixedMapDataset

        return MixedMapDataset(datasets, weights)

    def select_from_datasets(
        cls, datasets: Sequence[MapDataset], selection_map: DatasetSelectionMap
    ) -> MapDataset:
        """Returns a dataset whose index ``i`` is ``datasets[d][j]`` for ``(d, j) = selection_map[i]``."""
        from grain_core.dataset.mixing import SelectionMapDataset

        return SelectionMapDataset(datasets, selection_map)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        from grain_core.plugins import registry

        return registry.dataset_factory(cls.__name__, name)

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
        # Grain-style subclasses implement __getitem__ directly; route the kernel's calls to it.
        if "__getitem__" in cls.__dict__ and "_getitem" not in cls.__dict__:
            user_getitem = cls.__dict__["__getitem__"]

            def _getitem(self, index: int, _get=user_getitem):
                return _get(self, index)

            cls._getitem = _getitem  # type: ignore[method-assign]

    def _getitem(self, index: int) -> T | None:
        """Returns the element at a non-negative ``index`` (past ``len`` means a later epoch).

        Subclasses implement this (or, Grain-style, ``__getitem__`` for ints, which is then used).
        """
        raise NotImplementedError(f"{type(self).__name__} implements neither _getitem nor __getitem__.")

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

    def __iter__(self) -> DatasetIterator[T]:
        return self.to_iter_dataset().__iter__()

    def _fingerprint_fields(self) -> tuple[Any, ...]:
        """What, besides class and length, identifies this stage in iterator states."""
        return ()

    # --- transformations -------------------------------------------------------------------------

    def seed(self, seed: int) -> MapDataset[T]:
        """Returns this dataset with ``seed`` as the pipeline seed for downstream transformations."""
        from grain_core.dataset.map_ops import SeedMapDataset

        return SeedMapDataset(self, seed)

    def shuffle(self, seed: int | None = None) -> MapDataset[T]:
        """Returns the same elements globally shuffled, differently in every epoch."""
        from grain_core.dataset.map_ops import ShuffleMapDataset

        return ShuffleMapDataset(self, seed=seed)

    def slice(self, sl: slice) -> MapDataset[T]:
        """Returns the elements at the positions of ``sl`` (``ds[a:b:c]`` is the same)."""
        from grain_core.dataset.map_ops import SliceMapDataset

        return SliceMapDataset(self, sl)

    def map(self, transform: Any) -> MapDataset:
        """Returns elements passed through ``transform`` (a ``Map`` or a callable)."""
        from grain_core.dataset.map_ops import MapMapDataset

        return MapMapDataset(self, transform)

    def random_map(self, transform: Any, *, seed: int | None = None) -> MapDataset:
        """Returns elements passed through ``transform(x, rng)``, ``rng`` a pure function of
        (seed, index)."""
        from grain_core.dataset.map_ops import RandomMapMapDataset

        return RandomMapMapDataset(self, transform, seed=seed)

    def map_with_index(self, transform: Any) -> MapDataset:
        """Returns ``transform(index, element)`` for each element."""
        from grain_core.dataset.map_ops import MapWithIndexMapDataset

        return MapWithIndexMapDataset(self, transform)

    def filter(self, transform: Any) -> MapDataset[T]:
        """Returns the dataset with ``None`` where ``transform(element)`` is false."""
        from grain_core.dataset.map_ops import FilterMapDataset

        return FilterMapDataset(self, transform)

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> MapDataset[S]:
        """Returns consecutive elements of each epoch grouped by ``batch_size``, stacked leafwise."""
        from grain_core.dataset.map_ops import BatchMapDataset

        return BatchMapDataset(self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def repeat(self, num_epochs: int | None = None) -> MapDataset[T]:
        """Returns ``num_epochs`` epochs back to back; ``None`` repeats forever
        (``len == sys.maxsize``)."""
        from grain_core.dataset.map_ops import RepeatMapDataset

        return RepeatMapDataset(self, num_epochs)

    def apply(self, transformations: Any) -> MapDataset:
        """Applies one transform object or a sequence of them (``Map``, ``Filter``, ``Batch``, ...)."""
        from grain_core.dataset.apply import apply_transformations

        return apply_transformations(self, transformations)

    def to_iter_dataset(
        self, read_options: ReadOptions | None = None, *, allow_nones: bool = False
    ) -> IterDataset[T]:
        """Returns an ``IterDataset`` over this dataset, read ahead by ``read_options`` threads."""
        from grain_core.dataset.prefetch import PrefetchIterDataset

        return PrefetchIterDataset(self, read_options=read_options, allow_nones=allow_nones)


class IterDatasetMeta(abc.ABCMeta):
    """Metaclass holding ``IterDataset``'s factories; plugin factories resolve here by name."""

    def mix(
        cls,
        datasets: Sequence[IterDataset] | Mapping[str, IterDataset],
        weights: Sequence[float] | Mapping[str, float] | None = None,
    ) -> IterDataset:
        """Returns ``datasets`` interleaved by ``weights``; stops when any input is exhausted."""
        from grain_core.dataset.mixing import MixedIterDataset

        return MixedIterDataset(datasets, weights)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        from grain_core.plugins import registry

        return registry.dataset_factory(cls.__name__, name)

    def __dir__(cls) -> list[str]:
        from grain_core.plugins import registry

        return sorted(set(super().__dir__()) | set(registry.factory_names(cls.__name__)))


class IterDataset(_DatasetBase, Iterable[T], metaclass=IterDatasetMeta):
    """A lazy iterable dataset; ``iter(ds)`` returns a checkpointable ``DatasetIterator``."""

    def __init__(self, parents: Any = ()):
        super().__init__(parents)

    @abc.abstractmethod
    def __iter__(self) -> DatasetIterator[T]:
        """Returns a new iterator positioned at the start."""

    def seed(self, seed: int) -> IterDataset[T]:
        """Returns this dataset with ``seed`` as the pipeline seed for downstream transformations."""
        from grain_core.dataset.iter_ops import SeedIterDataset

        return SeedIterDataset(self, seed)

    def map(self, transform: Any) -> IterDataset:
        """Returns elements passed through ``transform`` (a ``Map`` or a callable)."""
        from grain_core.dataset.iter_ops import MapIterDataset

        return MapIterDataset(self, transform)

    def random_map(self, transform: Any, *, seed: int | None = None) -> IterDataset:
        """Returns ``transform(x, rng)``, ``rng`` a pure function of (seed, element count)."""
        from grain_core.dataset.iter_ops import RandomMapIterDataset

        return RandomMapIterDataset(self, transform, seed=seed)

    def map_with_index(self, transform: Any) -> IterDataset:
        """Returns ``transform(i, element)`` where ``i`` counts elements from 0."""
        from grain_core.dataset.iter_ops import MapWithIndexIterDataset

        return MapWithIndexIterDataset(self, transform)

    def filter(self, transform: Any) -> IterDataset[T]:
        """Returns only the elements for which ``transform(element)`` is true."""
        from grain_core.dataset.iter_ops import FilterIterDataset

        return FilterIterDataset(self, transform)

    def batch(
        self,
        batch_size: int,
        *,
        drop_remainder: bool = False,
        batch_fn: Callable[[Sequence[T]], S] | None = None,
    ) -> IterDataset[S]:
        """Returns consecutive elements grouped by ``batch_size``, stacked leafwise."""
        from grain_core.dataset.iter_ops import BatchIterDataset

        return BatchIterDataset(self, batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def apply(self, transformations: Any) -> IterDataset:
        """Applies one transform object or a sequence of them (``Map``, ``Filter``, ``Batch``, ...)."""
        from grain_core.dataset.apply import apply_transformations

        return apply_transformations(self, transformations)

    def mp_prefetch(
        self,
        options: MultiprocessingOptions | None = None,
        worker_init_fn: Callable[[int, int], None] | None = None,
    ) -> IterDataset[T]:
        """Returns this dataset produced by ``options.num_workers`` worker processes.

        Each worker runs the pipeline over its slice of the ``MapDataset`` stage; the output order
        depends only on the pipeline and the worker count. Without ``options``: 10 workers, capped
        at the number of CPUs.
        """
        from grain_core.runtime.multiprocess import MultiprocessPrefetchIterDataset

        return MultiprocessPrefetchIterDataset(self, options, worker_init_fn=worker_init_fn)

    def prefetch(self, multiprocessing_options: MultiprocessingOptions) -> IterDataset[T]:
        """Deprecated alias of :meth:`mp_prefetch`."""
        import warnings

        warnings.warn(
            "IterDataset.prefetch is deprecated; use mp_prefetch.", DeprecationWarning, stacklevel=2
        )
        return self.mp_prefetch(multiprocessing_options)


class DatasetIterator(Iterator[T], abc.ABC):
    """A stateful, checkpointable iterator. Not thread-safe: use it from one thread.

    ``get_state()`` returns a JSON-serialisable dict (see :mod:`grain_core.state`); ``set_state`` on a
    fresh iterator of the same pipeline continues with exactly the same elements.
    """

    #: True for iterators with one parent that return exactly one element per parent element, in
    #: order, and whose state is either the parent's state or ``{"kind", "parent", ...}`` where an
    #: int field ``count`` (if any) is the number of elements returned and every other field is
    #: identifying (a seed). Elastic restore (``grain_core.runtime.elastic``) relies on it.
    one_to_one: bool = False

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

    @abc.abstractmethod
    def get_state(self) -> dict[str, Any]:
        """Returns the current position as a JSON-serialisable dict."""

    @abc.abstractmethod
    def set_state(self, state: dict[str, Any]) -> None:
        """Moves to the position ``state`` describes (a dict from ``get_state`` of this pipeline)."""

    def start_prefetch(self) -> None:
        """Starts producing elements in the background, where the iterator can (else a no-op)."""
        for p in self._parents:
            p.start_prefetch()

    def close(self) -> None:
        """Releases threads, processes and files this iterator holds. Idempotent."""
        for p in self._parents:
            p.close()

    def __enter__(self) -> DatasetIterator[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _apply_options(self, options: DatasetOptions) -> None:
        """Applies pipeline-wide options to this iterator and everything upstream of it."""
        self._options = options.merge(self._options) if self._options else options
        for p in self._parents:
            p._apply_options(options)

    def save(self, directory: Any) -> Coroutine[Any, Any, None]:
        """Returns a coroutine writing ``get_state()`` as of this call into ``directory``.

        The state is captured before returning (not when the coroutine runs), as Orbax expects.
        """
        from grain_core.checkpoint import save_iterator_state

        return save_iterator_state(self, directory)

    async def load(self, directory: Any) -> None:
        """Reads a state written by :meth:`save` from ``directory`` and sets it."""
        from grain_core.checkpoint import load_iterator_state

        await load_iterator_state(self, directory)


def infinite_length() -> int:
    """The length of an infinite ``MapDataset`` (``sys.maxsize``)."""
    return sys.maxsize
