"""The core ``MapDataset`` transformations. Each works on whole index arrays in ``__getitems__``."""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_core import global_config as _config
from grain_core import seeds as _seeds
from grain_core import shuffle_cipher as _cipher
from grain_core import transforms as tr
from grain_core.dataset.base import MapDataset
from grain_core.dataset.batching import stack_batch, stack_batches
from grain_core.dataset.callables import as_callable
from grain_core.dataset.seed_lineage import SeedLineage
from grain_core.dataset.sequential import even_split
from grain_core.index_arrays import unique_ints
from grain_core.validation import ArgumentTypeError, check_int


def _index_array(indices: Sequence[int] | np.ndarray) -> np.ndarray:
    if type(indices) is range:  # what to_iter_dataset reads with: no element-wise conversion
        return np.arange(indices.start, indices.stop, indices.step, dtype=np.int64)
    return np.asarray(indices, dtype=np.int64)


def source_identity(source: Any) -> str:
    """A stable description of a data source for iterator states: its ``repr`` if the class defines
    one, otherwise its type name (default reprs contain memory addresses)."""
    if type(source).__repr__ is object.__repr__:
        return type(source).__qualname__
    if isinstance(source, (list, tuple, range)):
        return type(source).__name__
    text = repr(source)
    return text if len(text) <= 512 else text[:512]


class SourceMapDataset(MapDataset):
    """Elements of a random-access source, index modulo its length."""

    def __init__(self, source: Any):
        super().__init__()
        if isinstance(source, MapDataset):
            raise TypeError("MapDataset.source expects a data source, got a MapDataset; use it as is.")
        if not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
            raise TypeError(
                "MapDataset.source expects a Sequence or a RandomAccessDataSource (with __len__ and "
                f"__getitem__), got {type(source).__name__}."
            )
        self._source = source
        self._len = len(source)
        self._bulk = getattr(source, "__getitems__", None)
        # A source that declares ``getitems_takes_arrays`` gets its keys as one int64 array (no
        # list of Python ints built here for it to turn back into an array).
        self._bulk_arrays = self._bulk is not None and bool(
            getattr(source, "getitems_takes_arrays", False)
        )

    @property
    def source(self) -> Any:
        """The wrapped data source."""
        return self._source

    def __len__(self) -> int:
        return self._len

    def fingerprint_fields(self):
        return {"source": source_identity(self._source)}

    def _empty(self):
        return IndexError("Cannot read from an empty data source (length 0).")

    def element_at(self, index: int):
        if self._len == 0:
            raise self._empty()
        return self._source[index % self._len]

    def __getitems__(self, indices):
        if self._len == 0:
            if len(indices):
                raise self._empty()
            return []
        if type(indices) is range and indices.step == 1 and 0 <= indices.start <= indices.stop <= self._len:
            # consecutive and in range (to_iter_dataset's reads): no modulo
            keys = _index_array(indices) if self._bulk_arrays else list(indices)
        else:
            keys = _index_array(indices) % self._len
            if not self._bulk_arrays:
                keys = keys.tolist()
        if self._bulk is not None:
            return list(self._bulk(keys))
        src = self._source
        return [src[i] for i in keys]

    def __str__(self) -> str:
        return f"SourceMapDataset({source_identity(self._source)})"

    def set_slice(self, sl: slice, sequential_slice: bool = False) -> None:
        """Grain's worker slicing, in place: with ``sequential_slice`` (the only kind Grain
        supports for sources; otherwise ``AssertionError``), worker ``sl.start`` of ``sl.step``
        keeps its contiguous block of the original source (``even_split``)."""
        if not sequential_slice:  # Grain asserts; raised here even under python -O
            raise AssertionError("Only sequential slicing is supported.")
        original = self.__dict__.setdefault("_original_source", self._source)
        start, stop = even_split(len(original), sl.start or 0, sl.step or 1)
        self._source = _Block(original, start, stop)
        self._len = stop - start
        self._bulk, self._bulk_arrays = self._source.__getitems__, False


class _Block:
    """Records ``[start, stop)`` of a source (what ``set_slice`` leaves a worker)."""

    def __init__(self, source: Any, start: int, stop: int):
        self._src, self._start, self._stop = source, start, stop
        self._bulk = getattr(source, "__getitems__", None)

    def __len__(self) -> int:
        return self._stop - self._start

    def __getitem__(self, index: int) -> Any:
        return self._src[self._start + index]

    def __getitems__(self, indices: Any) -> list[Any]:
        keys = [self._start + int(i) for i in indices]
        if self._bulk is not None:
            return list(self._bulk(keys))
        return [self._src[i] for i in keys]

    def __repr__(self) -> str:
        return f"{source_identity(self._src)}[{self._start}:{self._stop}]"


class SeedMapDataset(MapDataset):
    """Passes elements through; sets the pipeline seed for downstream random transformations."""

    one_to_one = True

    def __init__(self, parent: MapDataset, seed: int):
        super().__init__(parent)
        self._seed = _seeds.validate_seed(seed, bounded=False)
        self._seed_rng_seed = self._seed  # read by grain_core.seeds.default_seed
        self._lineage = SeedLineage((self._seed,), 0)
        self._parent = parent

    def __len__(self):
        return len(self._parent)

    def fingerprint_fields(self):
        return {"seed": self._seed}

    def element_at(self, index):
        return self._parent.element_at(index)

    def __getitems__(self, indices):
        return self._parent.__getitems__(indices)


class ShuffleMapDataset(MapDataset):
    """Grain's global shuffle: epoch ``e`` is ``grain_core.shuffle_cipher.IndexPermutation(n, seed, e)``,
    a permutation (Grain's order for every ``n`` but ``2**k + 1``, ``k >= 16`` even, where Grain
    repeats one element and drops one: reproduced only when built with ``grain_core.config``
    ``grain_exact`` on)."""

    #: Each epoch orders the elements differently (a slice below reads one fixed set of them).
    reorders_each_epoch = True

    def __init__(self, parent: MapDataset, seed: int | None = None):
        super().__init__(parent)
        self._parent = parent
        self._seed = self.resolve_seed(seed)
        self._n = len(parent)
        if self._n >= sys.maxsize:
            raise ValueError(
                "Cannot shuffle an infinite dataset: shuffle before repeat(), e.g. "
                "ds.shuffle(seed).repeat()."
            )
        self._perm_cache: tuple[int, _cipher.IndexPermutation] | None = None
        self._grain_exact = _config.grain_exact()

    def __len__(self):
        return self._n

    def fingerprint_fields(self):
        short = _cipher.grain_block_is_short(self._n - 1)
        return {"seed": self._seed, **_config.mode_fields(self._grain_exact, short)}

    def _perm(self, epoch: int) -> _cipher.IndexPermutation:
        cached = self._perm_cache
        if cached is not None and cached[0] == epoch:
            return cached[1]
        perm = _cipher.IndexPermutation(self._n, self._seed, epoch, grain_exact=self._grain_exact)
        self._perm_cache = (epoch, perm)
        return perm

    def element_at(self, index):
        n = self._n
        if n == 0:
            raise IndexError("Cannot read from an empty dataset.")
        epoch, j = divmod(index, n)
        return self._parent.element_at(epoch * n + self._perm(epoch)(j))

    def __getitems__(self, indices):
        n = self._n
        idx = _index_array(indices)
        if idx.size == 0:
            return []
        if n == 0:
            raise IndexError("Cannot read from an empty dataset.")
        epochs, local = np.divmod(idx, n)
        first = int(epochs[0])
        if (epochs == first).all():
            mapped = self._perm(first)(local) + first * n
        else:
            mapped = np.empty_like(idx)
            for e in unique_ints(epochs).tolist():
                sel = epochs == e
                perm = _cipher.IndexPermutation(n, self._seed, e, grain_exact=self._grain_exact)
                mapped[sel] = perm(local[sel]) + e * n
        return self._parent.__getitems__(mapped)


class SliceMapDataset(MapDataset):
    """The positions of a slice; later epochs continue in the parent's later epochs, except where
    that would let elements the slice leaves out back in: a slice of fewer elements than its
    parent, above a stage that orders each epoch differently (``reorders_each_epoch``: shuffles),
    reads the same parent positions every epoch. Built with ``grain_core.config.grain_exact``
    on, it reads the parent's later epochs there too, as Grain 0.2.18 does (Grain issue 1200).
    """

    def __init__(self, parent: MapDataset, sl: slice):
        super().__init__(parent)
        if not isinstance(sl, slice):
            raise ArgumentTypeError(
                f"sl is not a slice: {type(sl)}. MapDataset.slice expects a slice object, e.g. "
                "ds.slice(slice(2, 10, 2)) (or ds[2:10:2])."
            )
        if sl.step == 0:
            raise ValueError("slice step cannot be zero.")
        self._parent = parent
        self._n = len(parent)
        self._start, self._stop, self._step = sl.indices(self._n)
        self._len = len(range(self._start, self._stop, self._step))
        self._grain_exact = _config.grain_exact()
        # Whether later epochs would read other elements than the first (Grain's leak).
        self._leaks = self._len < self._n and _reorders_each_epoch(parent)
        # Parent positions between epochs: the parent's next epoch, or the same positions again.
        self._epoch_stride = self._n if self._grain_exact or not self._leaks else 0

    def __len__(self):
        return self._len

    def fingerprint_fields(self):
        # No data_mode here: the modes differ only past the slice's end, which a repeat above reads
        # (RepeatMapDataset records it); a worker's slice read within its length restores Grain's
        # states in either mode.
        return {"start": self._start, "stop": self._stop, "step": self._step}

    def element_at(self, index):
        if self._len == 0:
            raise IndexError("Cannot read from an empty slice.")
        epoch, j = divmod(index, self._len)
        return self._parent.element_at(self._start + j * self._step + epoch * self._epoch_stride)

    def __getitems__(self, indices):
        idx = _index_array(indices)
        if idx.size == 0:
            return []
        if self._len == 0:
            raise IndexError("Cannot read from an empty slice.")
        if self._n >= sys.maxsize and int(idx.max()) >= self._len:
            # Later epochs of a slice of an infinite parent lie past int64: read them one by one
            # with Python ints, exactly as element_at does.
            return [self.element_at(int(i)) for i in idx]
        epoch, j = np.divmod(idx, self._len)
        return self._parent.__getitems__(self._start + j * self._step + epoch * self._epoch_stride)

    def __str__(self) -> str:
        return f"SliceMapDataset[{self._start}:{self._stop}:{self._step}]"


def _reads_fixed_slices(ds: MapDataset) -> bool:
    """Whether ``ds``'s ``MapDataset`` graph holds a slice built in correct mode whose later
    epochs read other elements than Grain's (the same elements every epoch)."""
    return any(
        isinstance(d, SliceMapDataset) and d._leaks and not d._grain_exact for d in _ancestors(ds)
    )


def _ancestors(ds: MapDataset) -> list[MapDataset]:
    """``ds`` and every ``MapDataset`` upstream of it, each once."""
    seen: dict[int, MapDataset] = {}
    todo: list[Any] = [ds]
    while todo:
        d = todo.pop()
        if id(d) in seen or not isinstance(d, MapDataset):
            continue
        seen[id(d)] = d
        todo.extend(d.parents)
    return list(seen.values())


def _reorders_each_epoch(ds: MapDataset) -> bool:
    """Whether a stage of ``ds``'s ``MapDataset`` graph declares ``reorders_each_epoch``."""
    return any(getattr(d, "reorders_each_epoch", False) for d in _ancestors(ds))


class _OneToOneMapDataset(MapDataset):
    def __init__(self, parent: MapDataset, transform: Any, kind: type, where: str):
        super().__init__(parent)
        self._parent = parent
        self._transform = transform
        self._fn = as_callable(transform, kind, where)

    def __len__(self):
        return len(self._parent)

    def __str__(self) -> str:
        return f"{type(self).__name__}({tr.transform_name(self._transform)})"


class MapMapDataset(_OneToOneMapDataset):
    """``transform(element)`` for each element; ``None`` passes through."""

    one_to_one = True

    def __init__(self, parent: MapDataset, transform: Any):
        super().__init__(parent, transform, tr.Map, "map()")

    def element_at(self, index):
        x = self._parent.element_at(index)
        return None if x is None else self._fn(x)

    def __getitems__(self, indices):
        fn = self._fn
        return [None if x is None else fn(x) for x in self._parent.__getitems__(indices)]


class RandomMapMapDataset(_OneToOneMapDataset):
    """``transform(element, rng)`` with Grain's ``rng = element_rng(seed, index)``."""

    one_to_one = True

    def __init__(self, parent: MapDataset, transform: Any, seed: int | None = None):
        super().__init__(parent, transform, tr.RandomMap, "random_map()")
        self._seed = self.resolve_seed(seed, bounded=False)
        self._rngs = _seeds.ElementRngs(self._seed)

    def fingerprint_fields(self):
        return {"seed": self._seed}

    def element_at(self, index):
        x = self._parent.element_at(index)
        return None if x is None else self._fn(x, self._rngs(index))

    def __getitems__(self, indices):
        fn, rng = self._fn, self._rngs
        items = self._parent.__getitems__(indices)
        return [None if x is None else fn(x, rng(int(i))) for i, x in zip(indices, items)]


class MapWithIndexMapDataset(_OneToOneMapDataset):
    """``transform(index, element)`` for each element."""

    one_to_one = True

    def __init__(self, parent: MapDataset, transform: Any):
        super().__init__(parent, transform, tr.MapWithIndex, "map_with_index()")

    def element_at(self, index):
        x = self._parent.element_at(index)
        return None if x is None else self._fn(index, x)

    def __getitems__(self, indices):
        fn = self._fn
        items = self._parent.__getitems__(indices)
        return [None if x is None else fn(int(i), x) for i, x in zip(indices, items)]


class FilterMapDataset(_OneToOneMapDataset):
    """The element where ``transform(element)`` is true, else ``None``."""

    def __init__(self, parent: MapDataset, transform: Any):
        super().__init__(parent, transform, tr.Filter, "filter()")

    def element_at(self, index):
        x = self._parent.element_at(index)
        return x if x is not None and self._fn(x) else None

    def __getitems__(self, indices):
        fn = self._fn
        return [x if x is not None and fn(x) else None for x in self._parent.__getitems__(indices)]


class BatchMapDataset(MapDataset):
    """Consecutive elements of each epoch, ``batch_size`` at a time; ``None`` elements are dropped."""

    def __init__(self, parent: MapDataset, batch_size: int, *, drop_remainder=False, batch_fn=None):
        super().__init__(parent)
        self._parent = parent
        self._bs = tr.check_batch_size(batch_size)
        self._drop = bool(drop_remainder)
        self._batch_fn = tr.check_batch_fn(batch_fn)
        self._n = len(parent)
        if self._n >= sys.maxsize or self._drop:
            self._len = self._n // self._bs
        else:
            self._len = math.ceil(self._n / self._bs)

    def __len__(self):
        return self._len

    @property
    def reads_per_element(self) -> int:
        """Parent elements one batch reads at most (see ``chunking.source_fan_in``)."""
        return self._bs

    def fingerprint_fields(self):
        return {"batch_size": self._bs, "drop_remainder": self._drop}

    def _parent_indices(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Parent indices of every requested batch, concatenated, and each batch's size."""
        if self._len == 0:
            raise IndexError("Cannot read from an empty batched dataset.")
        epoch, j = np.divmod(idx, self._len)
        starts = epoch * self._n + j * self._bs
        ends = np.minimum(starts + self._bs, epoch * self._n + self._n)
        sizes = ends - starts
        total = int(sizes.sum())
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
        return np.arange(total, dtype=np.int64) + offsets, sizes

    def _make(self, items: list[Any]):
        items = [x for x in items if x is not None]
        if not items:
            return None
        return stack_batch(items, self._batch_fn)

    def element_at(self, index):
        return self.__getitems__([index])[0]

    def __getitems__(self, indices):
        idx = _index_array(indices)
        if idx.size == 0:
            return []
        flat, sizes = self._parent_indices(idx)
        items = self._parent.__getitems__(flat)
        if len([x for x in items if x is not None]) == len(items):  # one pass; no None to drop
            return stack_batches(items, sizes.tolist(), self._batch_fn)
        out, pos = [], 0
        for s in sizes.tolist():
            out.append(self._make(items[pos : pos + s]))
            pos += s
        return out


class RepeatMapDataset(MapDataset):
    """``num_epochs`` epochs of the parent; forever (``len == sys.maxsize``) when ``None``.

    Epoch ``e`` reads the parent's indices of epoch ``e`` (so upstream shuffles and random maps
    differ per epoch), or, with ``reseed_each_epoch=False``, those of epoch 0 again (as in Grain).
    """

    def __init__(
        self, parent: MapDataset, num_epochs: int | None = None, *, reseed_each_epoch: bool = True
    ):
        super().__init__(parent)
        n = len(parent)
        # Without reseeding, epoch e reads the parent's first epoch again (index modulo n).
        self._reseed = bool(reseed_each_epoch)
        if n >= sys.maxsize:
            raise ValueError("Cannot repeat an infinite dataset (it is already repeated).")
        if num_epochs is not None:
            num_epochs = check_int(num_epochs, "repeat: num_epochs", minimum=1)
        self._parent = parent
        self._epochs = num_epochs
        # Repeating an empty dataset gives an empty one (as in Grain), never an infinite dataset
        # that fails on its first read.
        self._len = n * num_epochs if num_epochs is not None else (sys.maxsize if n else 0)
        self._parent_len = n
        self._reseed = bool(reseed_each_epoch)

    def __len__(self):
        return self._len

    def fingerprint_fields(self):
        if self._reseed:
            # Later epochs of a correct-mode slice of a shuffled parent differ from Grain's.
            return {"num_epochs": self._epochs, **_config.mode_fields(False, _reads_fixed_slices(self))}
        return {"num_epochs": self._epochs, "reseed_each_epoch": False}

    def element_at(self, index):
        if not self._reseed:
            index = index % len(self._parent)
        return self._parent.element_at(index)

    def __getitems__(self, indices):
        if not self._reseed:
            indices = _index_array(indices) % len(self._parent)
        return self._parent.__getitems__(indices)


class FlatMapMapDataset(MapDataset):
    """Up to ``transform.max_fan_out`` elements per parent element; unused slots are ``None``."""

    def __init__(self, parent: MapDataset, transform: tr.FlatMap):
        super().__init__(parent)
        self._fn = as_callable(transform, tr.FlatMap, "FlatMapMapDataset")
        self._transform = transform
        self._fan_out = check_int(
            getattr(transform, "max_fan_out", 0), "FlatMap.max_fan_out", minimum=1
        )
        self._parent = parent
        self._len = len(parent) * self._fan_out if len(parent) < sys.maxsize else sys.maxsize
        self._local = threading.local()

    def __len__(self):
        return self._len

    def fingerprint_fields(self):
        return {"max_fan_out": self._fan_out}

    def _expand(self, parent_index: int) -> list[Any]:
        cached = getattr(self._local, "last", None)
        if cached is not None and cached[0] == parent_index:
            return cached[1]
        x = self._parent.element_at(parent_index)
        out = [] if x is None else list(self._fn(x))
        if len(out) > self._fan_out:
            raise ValueError(
                f"{tr.transform_name(self._transform)} produced {len(out)} elements, more than its "
                f"max_fan_out={self._fan_out}. Raise max_fan_out."
            )
        self._local.last = (parent_index, out)
        return out

    def element_at(self, index):
        p, sub = divmod(index, self._fan_out)
        out = self._expand(p)
        return out[sub] if sub < len(out) else None


class ZipMapDataset(MapDataset):
    """Tuples of the elements at the same index of each parent; length of the shortest."""

    def __init__(self, parents: Sequence[MapDataset]):
        parents = list(parents)
        if not parents:
            raise ValueError("ZipMapDataset needs at least one dataset.")
        super().__init__(parents)
        self._len = min(len(p) for p in parents)

    def __len__(self):
        return self._len

    def element_at(self, index):
        items = tuple(p.element_at(index) for p in self._parents)
        return None if any(x is None for x in items) else items

    def __getitems__(self, indices):
        cols = [p.__getitems__(indices) for p in self._parents]
        return [None if any(x is None for x in row) else row for row in zip(*cols)]
