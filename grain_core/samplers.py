"""Samplers: which record the ``DataLoader`` reads at each position of its stream, as in Grain.

A sampler's positions are *global*: with ``shard_count`` shards, the ``DataLoader`` of shard ``k``
reads positions ``k, k + shard_count, k + 2 * shard_count, ...``. ``IndexSampler`` position ``p``
reads, from its shard's records ``[start, end)`` (``ShardOptions.bounds``), record
``start + perm_e(j)`` where ``q = p // shard_count``, ``e, j = divmod(q, end - start)`` and
``perm_e`` is epoch ``e`` of Grain's shuffle (``shuffle_cipher.IndexPermutation(end - start, seed, e)``) or
the identity. ``sampler[p].rng`` is ``np.random.Generator(np.random.Philox(key=seed + p))``.
These are Grain 0.2.18's rules (recorded: ``tests/compat_semantics/data/data_loader.json``),
with one exception unless ``grain_core.config.grain_exact`` is on when the sampler is built: with
sharding and ``drop_remainder=False`` Grain's ``len`` is ``num_epochs * num_records`` whatever the
shard's size, so a shard holding one record more than ``num_records / shard_count`` leaves it
unread (and later epochs start mid-shard); here ``len`` is ``num_epochs * shard size *
shard_count``, so each shard's ``DataLoader`` reads every one of its records each epoch.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.random.bit_generator import ISpawnableSeedSequence

from grain_core import global_config as _config
from grain_core import shuffle_cipher as _cipher
from grain_core.index_arrays import unique_ints
from grain_core.records import RecordMetadata
from grain_core.sharding import NoSharding, ShardOptions
from grain_core.validation import check_instance, check_int

__all__ = ["IndexSampler", "Sampler", "SequentialSampler"]


@runtime_checkable
class Sampler(Protocol):
    """Anything with ``sampler[i] -> RecordMetadata`` for positions ``i = 0, 1, ...``; raises
    ``IndexError`` past the end. Samplers may also define ``__len__`` (positions in the stream) and
    ``record_keys(positions) -> np.ndarray`` for fast bulk lookup."""

    def __getitem__(self, index: int) -> RecordMetadata: ...


def _check_sampler_seed(seed: Any) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"Expected seed of int type. Got seed with type {type(seed)}")
    if seed < 0 or int(seed).bit_length() > 32:
        raise ValueError("Seed should be positive 32-bit integer.")
    return int(seed)


_M64 = (1 << 64) - 1


class _PhiloxKey(ISpawnableSeedSequence):
    """Gives ``Philox`` the 128-bit key ``key`` as its seed state, so ``Philox(_PhiloxKey(k))`` is
    ``Philox(key=k)`` (counter 0, the same draws) without what ``Philox(key=k)`` also does: draw OS
    entropy for a seed sequence it never uses, about half the cost of a generator per record.
    ``spawn`` draws children from fresh entropy, as that unused seed sequence would."""

    __slots__ = ("key",)

    def __init__(self, key: int):
        self.key = key

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> np.ndarray:
        if n_words != 2 or np.dtype(dtype) != np.uint64:  # Philox asks for its key only
            raise ValueError(
                f"_PhiloxKey gives Philox's key (2 uint64 words), not {n_words} {dtype}"
            )
        return np.array((self.key & _M64, self.key >> 64), dtype=np.uint64)

    def spawn(self, n_children: int) -> list[Any]:
        return np.random.SeedSequence().spawn(n_children)


def _position_rng(seed: int | None, index: int) -> np.random.Generator | None:
    """A new ``np.random.Generator(np.random.Philox(key=seed + index))`` (None without a seed)."""
    if seed is None:
        return None
    # numpy's stubs name SeedSequence; Philox takes any ISeedSequence.
    return np.random.Generator(np.random.Philox(_PhiloxKey(seed + index)))  # type: ignore[arg-type]


class IndexSampler:
    """Global positions → records with epochs, per-epoch shuffling and contiguous sharding.

    Args:
      num_records: records to read from the data source (its first ``num_records`` records).
      shard_options: which contiguous part of the records this process reads.
      shuffle: visit each epoch's records in a new seeded order (needs ``seed``).
      num_epochs: passes over the shard; ``None`` (the default, as in Grain) repeats forever.
      seed: seed of the shuffle and of the per-position ``rng``, an int in ``[0, 2**32)``.
    """

    def __init__(
        self,
        num_records: int,
        shard_options: ShardOptions | None = None,
        shuffle: bool = False,
        num_epochs: int | None = None,
        seed: int | None = None,
    ):
        num_records = check_int(num_records, "IndexSampler num_records", minimum=None)
        if num_records <= 0:  # Grain's wording
            raise ValueError(
                f"Invalid number of records in Sampler. Got {num_records} records, but number of "
                "records must be greater than 0. Build the sampler with num_records=len(source)."
            )
        if shard_options is None:
            shard_options = NoSharding()
        check_instance(
            shard_options,
            ShardOptions,
            "IndexSampler shard_options",
            expected="a ShardOptions (NoSharding(), ShardByJaxProcess(), ShardOptions(...))",
        )
        if num_epochs is not None:
            num_epochs = check_int(num_epochs, "IndexSampler num_epochs", minimum=None)
            if num_epochs <= 0:  # Grain's wording
                raise ValueError(
                    f"Invalid number of epochs in Index Sampler. Got {num_epochs} epochs, but "
                    "number of epochs must be greater than 0 (or None to repeat forever)."
                )
        if shuffle and seed is None:
            raise ValueError("Shuffling requires specifying a seed.")
        seed = _check_sampler_seed(seed)
        self._num_records = num_records
        self._shard_options = shard_options
        self._shuffle = bool(shuffle)
        self._num_epochs = num_epochs
        self._seed = seed
        self._grain_exact = _config.grain_exact()
        self._start, end = shard_options.bounds(num_records)
        self._size = end - self._start
        if num_epochs is None:
            self._len = sys.maxsize
        else:
            self._len = num_epochs * num_records
            if shard_options.shard_count > 1 and (shard_options.drop_remainder or not self._grain_exact):
                self._len = self._size * shard_options.shard_count * num_epochs
        self._perm_cache: tuple[int, _cipher.IndexPermutation] | None = None

    # --- properties -------------------------------------------------------------------------------

    @property
    def num_records(self) -> int:
        return self._num_records

    @property
    def shard_options(self) -> ShardOptions:
        return self._shard_options

    @property
    def shuffle(self) -> bool:
        return self._shuffle

    @property
    def num_epochs(self) -> int | None:
        return self._num_epochs

    @property
    def seed(self) -> int | None:
        return self._seed

    @property
    def shard_range(self) -> tuple[int, int]:
        """The ``[start, end)`` records of this shard."""
        return self._start, self._start + self._size

    @property
    def rng_seed(self) -> int | None:
        """The seed keying every position's ``rng`` (None without a seed)."""
        return self._seed

    def __len__(self) -> int:
        """Positions in the stream over all shards (``sys.maxsize`` when infinite)."""
        return self._len

    # --- lookup -----------------------------------------------------------------------------------

    def _perm(self, epoch: int) -> _cipher.IndexPermutation:
        cached = self._perm_cache
        if cached is not None and cached[0] == epoch:
            return cached[1]
        assert self._seed is not None  # a shuffling sampler has a seed
        perm = _cipher.IndexPermutation(self._size, self._seed, epoch, grain_exact=self._grain_exact)
        self._perm_cache = (epoch, perm)
        return perm

    def _out_of_bounds(self, index: int) -> IndexError:
        top = None if self._len >= sys.maxsize else self._len
        return IndexError(
            f"RecordMetadata object index is out of bounds; Got index {index}, allowed indices "
            f"should be in [0, {top}]"
        )

    def _check(self, index: Any) -> int:
        if isinstance(index, bool):
            raise TypeError("sampler positions must be ints, got bool.")
        i = operator.index(index)
        if not 0 <= i < self._len:
            raise self._out_of_bounds(i)
        if self._size == 0:
            raise IndexError(f"Shard {self._shard_options!r} of {self._num_records} records is empty.")
        return i

    def record_key(self, index: int) -> int:
        """The record read at position ``index``."""
        i = self._check(index)
        epoch, j = divmod(i // self._shard_options.shard_count, self._size)
        if self._shuffle:
            j = self._perm(epoch)(j)
        return self._start + j

    def record_keys(self, positions: Sequence[int] | np.ndarray) -> np.ndarray:
        """The records read at ``positions`` (vectorised)."""
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size == 0:
            return pos.copy()
        if int(pos.min()) < 0 or int(pos.max()) >= self._len:
            raise self._out_of_bounds(int(pos.min()) if int(pos.min()) < 0 else int(pos.max()))
        if self._size == 0:
            raise IndexError(f"Shard {self._shard_options!r} of {self._num_records} records is empty.")
        epochs, local = np.divmod(pos // self._shard_options.shard_count, self._size)
        if self._shuffle:
            first = int(epochs[0])
            if (epochs == first).all():
                local = self._perm(first)(local)
            else:
                out = np.empty_like(local)
                for e in unique_ints(epochs).tolist():
                    sel = epochs == e
                    perm = _cipher.IndexPermutation(self._size, self._seed, e, grain_exact=self._grain_exact)  # type: ignore[arg-type]
                    out[sel] = perm(local[sel])
                local = out
        return local + self._start

    def rng(self, index: int) -> np.random.Generator | None:
        """The per-position generator: ``Philox(key=seed + index)`` (None without a seed)."""
        return _position_rng(self._seed, index)

    def __getitem__(self, index: int) -> RecordMetadata:
        i = self._check(index)
        return RecordMetadata(index=i, record_key=self.record_key(i), rng=self.rng(i))

    def __iter__(self) -> Iterator[RecordMetadata]:
        i = 0
        while i < self._len:
            yield self[i]
            i += 1

    # --- identity ---------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_records={self._num_records}, "
            f"shard_options={self._shard_options!r}, shuffle={self._shuffle}, "
            f"num_epochs={self._num_epochs}, seed={self._seed})"
        )

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_perm_cache"] = None
        return state


class SequentialSampler(IndexSampler):
    """Records in order: position ``p`` reads record ``p`` (sharding is the ``DataLoader``'s
    stepping over positions, as in Grain); ``num_records // shard_count * shard_count`` positions
    with ``drop_remainder``, else ``num_records``."""

    def __init__(self, num_records: int, shard_options: ShardOptions | None = None, seed: int | None = None):
        super().__init__(num_records, shard_options, shuffle=False, num_epochs=1, seed=seed)
        so = self._shard_options
        self._start, self._size = 0, self._num_records
        self._len = (
            self._num_records // so.shard_count * so.shard_count
            if so.drop_remainder
            else self._num_records
        )

    def record_key(self, index: int) -> int:
        return self._check(index)

    def record_keys(self, positions: Sequence[int] | np.ndarray) -> np.ndarray:
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= self._len):
            raise self._out_of_bounds(int(pos.min()) if int(pos.min()) < 0 else int(pos.max()))
        return pos.copy()

    def __repr__(self) -> str:
        return (
            f"SequentialSampler(num_records={self._num_records}, "
            f"shard_options={self._shard_options!r})"
        )
