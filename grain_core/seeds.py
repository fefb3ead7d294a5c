"""The seed contract: how pipeline seeds become per-transformation and per-element randomness.

Rules (see ``docs/contracts.md``):

* ``ds.seed(s)`` sets the pipeline seed for everything downstream. A random transformation with no
  explicit ``seed=`` derives its own seed with :func:`derive_seed` from the pipeline seeds it sees and
  its position below the ``seed`` call. An explicit ``seed=`` always wins.
* Per-element randomness is a pure function of ``(derived seed, element index)`` via
  :func:`element_rng`: identical on every run, process, worker count and platform. Python's ``hash()``
  is never used.
* Global shuffling uses :class:`IndexPermutation`, a keyed bijection on ``[0, n)`` computed per index
  in O(1) memory for ``n`` up to ``2**62``, different for every epoch, and vectorised over arrays.

Plugins must use these functions so that their randomness obeys the same rules as the kernel's.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

__all__ = [
    "MAX_SEED",
    "ElementRngs",
    "IndexPermutation",
    "index_shuffle",
    "derive_seed",
    "element_rng",
    "validate_seed",
]

MAX_SEED = 2**32 - 1
_M64 = 0xFFFF_FFFF_FFFF_FFFF
_GOLDEN = 0x9E37_79B9_7F4A_7C15
_MIX1 = 0xBF58_476D_1CE4_E5B9
_MIX2 = 0x94D0_49BB_1331_11EB


def validate_seed(seed: object, what: str = "seed") -> int:
    """Returns ``seed`` as an int if it is an integer in ``[0, 2**32)``, else raises.

    Raises:
      TypeError: ``seed`` is not an integer (bools are refused too).
      ValueError: ``seed`` is outside ``[0, 2**32)``.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{what} must be an integer in [0, 2**32), got {type(seed).__name__} {seed!r}.")
    value = int(seed)
    if not 0 <= value <= MAX_SEED:
        raise ValueError(f"{what} must be in [0, 2**32), got {value}.")
    return value


def _splitmix64(x: int) -> int:
    x = (x + _GOLDEN) & _M64
    x = ((x ^ (x >> 30)) * _MIX1) & _M64
    x = ((x ^ (x >> 27)) * _MIX2) & _M64
    return x ^ (x >> 31)


def derive_seed(seeds: int | Sequence[int], *salt: int) -> int:
    """Returns a seed in ``[0, 2**32)`` that depends on every value of ``seeds`` and ``salt``.

    ``derive_seed(s, position)`` is how a transformation at ``position`` below ``ds.seed(s)`` gets its
    seed; ``derive_seed(s, epoch)`` is how per-epoch keys are made. Order matters; the result is
    stable across processes, platforms and versions of grain_core with the same major version.
    """
    values = (seeds,) if isinstance(seeds, (int, np.integer)) else tuple(seeds)
    acc = 0x6772_6169_6E5F_636F  # arbitrary non-zero start
    for v in (*values, len(values), *salt):
        acc = _splitmix64(acc ^ (int(v) & _M64))
    return acc >> 32


def element_rng(seed: int, index: int) -> np.random.Generator:
    """Returns a fresh ``np.random.Generator`` for element ``index`` of a transformation seeded ``seed``.

    The stream is a pure function of ``(seed, index)``: Philox keyed by the seed, with the index as
    the counter's high word, so distinct indices never share a stream.
    """
    bitgen = np.random.Philox(key=int(seed) & _M64, counter=[0, 0, 0, int(index) & _M64])
    return np.random.Generator(bitgen)


class ElementRngs:
    """Per-element generators for one transformation seeded ``seed``, reusing one generator per
    thread: ``rngs(index)`` equals ``element_rng(seed, index)`` in every draw but costs a state
    reset instead of a construction. The returned generator is only valid until the next call
    from the same thread.
    """

    def __init__(self, seed: int):
        import threading

        self._key = np.array([int(seed) & _M64, 0], dtype=np.uint64)
        self._local = threading.local()

    def __getstate__(self) -> dict:
        return {"key": self._key}

    def __setstate__(self, state: dict) -> None:
        import threading

        self._key = state["key"]
        self._local = threading.local()

    def __call__(self, index: int) -> np.random.Generator:
        local = self._local
        gen = getattr(local, "gen", None)
        if gen is None:
            gen = local.gen = np.random.Generator(np.random.Philox(key=int(self._key[0])))
        gen.bit_generator.state = {
            "bit_generator": "Philox",
            "state": {
                "counter": np.array([0, 0, 0, int(index) & _M64], dtype=np.uint64),
                "key": self._key,
            },
            "buffer": np.zeros(4, dtype=np.uint64),
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }
        return gen


def _mix_array(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(_GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(_MIX1)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(_MIX2)
    return x ^ (x >> np.uint64(31))


_ROUNDS_DEFAULT = 6


def index_shuffle(index: int, max_index: int, seed: int, rounds: int = _ROUNDS_DEFAULT) -> int:
    """The position of ``index`` in a seeded permutation of ``[0, max_index]`` (inclusive, as in
    Grain's ``index_shuffle``); ``IndexPermutation(max_index + 1, seed, rounds=rounds)(index)``."""
    return IndexPermutation(max_index + 1, seed, rounds=rounds)(index)


class IndexPermutation:
    """A keyed bijection on ``[0, n)``: an unbalanced Feistel network over the smallest power of two
    at or above ``n`` (so at most twice ``n``), with cycle walking back into range.

    ``perm(i)`` maps one index, ``perm(array)`` maps an integer array elementwise; both agree. Memory
    is O(1) in ``n``. ``perm.inverse(j)`` undoes ``perm(i)``.
    """

    _SCALAR_BELOW = 64  # arrays this small are mapped element by element (fewer numpy calls)

    def __init__(self, n: int, seed: int, epoch: int = 0, rounds: int = _ROUNDS_DEFAULT):
        n = operator.index(n)
        if n < 0:
            raise ValueError(f"permutation size must be >= 0, got {n}.")
        if n > 2**62:
            raise ValueError(f"permutation size must be <= 2**62, got {n}.")
        self.n = n
        bits = max(2, (max(n - 1, 1)).bit_length())
        high, low = bits // 2, bits - bits // 2
        # Round r splits the value into a high part of splits[r][0] bits and a low part of
        # splits[r][1] bits; each round swaps the two sizes.
        if not isinstance(rounds, int) or rounds < 2:
            raise ValueError(f"a permutation needs at least 2 Feistel rounds, got {rounds!r}.")
        self._splits = tuple((high, low) if r % 2 == 0 else (low, high) for r in range(rounds))
        base = derive_seed((validate_seed(seed), operator.index(epoch) & _M64))
        self._keys = tuple(_splitmix64((base << 8) | r) for r in range(rounds))

    def _encrypt(self, x: int) -> int:
        for key, (hb, lb) in zip(self._keys, self._splits):
            lo = x & ((1 << lb) - 1)
            x = (lo << hb) | ((x >> lb) ^ (_splitmix64(lo ^ key) & ((1 << hb) - 1)))
        return x

    def __call__(self, index):
        if isinstance(index, np.ndarray):
            if index.size < self._SCALAR_BELOW:
                flat = [self(int(i)) for i in index.reshape(-1).tolist()]
                return np.asarray(flat, dtype=np.int64).reshape(index.shape)
            return self._map_array(index)
        i = operator.index(index)
        if not 0 <= i < self.n:
            raise IndexError(f"index {i} out of range for a permutation of {self.n}.")
        while True:
            i = self._encrypt(i)
            if i < self.n:
                return i

    def _map_array(self, indices: np.ndarray) -> np.ndarray:
        x = np.asarray(indices, dtype=np.uint64)
        if x.size and (int(x.max()) >= self.n):
            raise IndexError(f"index {int(x.max())} out of range for a permutation of {self.n}.")
        out = x.copy()
        pending = np.arange(x.size)
        cur = x.copy()
        n = np.uint64(self.n)
        rounds = [
            (np.uint64(k), np.uint64(hb), np.uint64(lb), np.uint64((1 << hb) - 1), np.uint64((1 << lb) - 1))
            for k, (hb, lb) in zip(self._keys, self._splits)
        ]
        with np.errstate(over="ignore"):
            while pending.size:
                for key, hb, lb, hmask, lmask in rounds:
                    lo = cur & lmask
                    cur = (lo << hb) | ((cur >> lb) ^ (_mix_array(lo ^ key) & hmask))
                done = cur < n
                out[pending[done]] = cur[done]
                pending, cur = pending[~done], cur[~done]
        return out.astype(np.int64).reshape(np.shape(indices))

    def inverse(self, index: int) -> int:
        """Returns ``i`` such that ``self(i) == index``."""
        j = operator.index(index)
        if not 0 <= j < self.n:
            raise IndexError(f"index {j} out of range for a permutation of {self.n}.")
        while True:
            for key, (hb, lb) in zip(reversed(self._keys), reversed(self._splits)):
                lo = j >> hb
                hi = (j & ((1 << hb) - 1)) ^ (_splitmix64(lo ^ key) & ((1 << hb) - 1))
                j = (hi << lb) | lo
            if j < self.n:
                return j
