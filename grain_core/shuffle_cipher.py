"""Grain's index shuffle: the keyed bijection behind every global and window shuffle.

Reproduces google grain 0.2.18 exactly (recorded outputs: ``tests/compat_semantics/data/``; rules:
``docs/differences.md``). :func:`index_shuffle` is Grain's keyed bijection on ``[0, max_index]``: a
Simon block cipher over the index bits with ``std::seed_seq`` round keys, cycle-walked into range,
here vectorised over index arrays in O(1) memory (:class:`IndexShuffle`). :class:`IndexPermutation`
is the per-epoch permutation of Grain's ``shuffle``: epoch ``e`` uses seed ``(seed + e) % 2**32``
and 4 rounds. :func:`shuffle_tables` computes the permutations of many seeds at once. Grain sizes
the cipher block one bit short for ``max_index == 2**k`` (``k >= 16`` even: index ``2**k`` aliases
index 0, a duplicate); by default the block is sized exactly (the same order for every other size),
and ``grain_exact=True`` (default: ``grain_core.config.grain_exact``) keeps Grain's block
(:func:`grain_block_is_short`).

Seeds are checked as :func:`grain_core.seeds.validate_seed` checks them; plugins use these functions
(through ``grain_core.author``) so that their shuffles obey the same rules as the kernel's.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from grain_core.global_config import grain_exact as _grain_exact_now
from grain_core.seeds import validate_seed

__all__ = [
    "SHUFFLE_ROUNDS",
    "IndexPermutation",
    "IndexShuffle",
    "grain_block_is_short",
    "index_shuffle",
    "shuffle_tables",
]

_M32 = 0xFFFF_FFFF

#: Rounds Grain's ``shuffle`` and window shuffles use.
SHUFFLE_ROUNDS = 4


def _seed_seq_words(seed: int, count: int) -> tuple[int, ...]:
    """``std::seed_seq{seed}.generate(...)`` of ``count`` 32-bit words (C++ [rand.util.seedseq])."""
    n = count
    words = [0x8B8B8B8B] * n
    t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
    p = (n - t) // 2
    q = p + t
    m = max(2, n)  # max(len(seed list) + 1, n) with a one-word seed list

    def tmix(x: int) -> int:
        return x ^ (x >> 27)

    for k in range(m):
        r1 = (1664525 * tmix(words[k % n] ^ words[(k + p) % n] ^ words[(k - 1) % n])) & _M32
        r2 = r1 + (1 if k == 0 else (k % n + seed) if k == 1 else k % n)
        r2 &= _M32
        words[(k + p) % n] = (words[(k + p) % n] + r1) & _M32
        words[(k + q) % n] = (words[(k + q) % n] + r2) & _M32
        words[k % n] = r2
    for k in range(m, m + n):
        r3 = (1566083941 * tmix((words[k % n] + words[(k + p) % n] + words[(k - 1) % n]) & _M32)) & _M32
        r4 = (r3 - k % n) & _M32
        words[(k + p) % n] ^= r3
        words[(k + q) % n] ^= r4
        words[k % n] = r4
    return tuple(words)


def _block_bits(max_index: int, grain_exact: bool) -> int:
    # Grain sizes the block from the floating-point log2 (so max_index == 2**k gets k bits and its
    # top index aliases index 0); the exact bit length differs only where Grain's block is short.
    bits = math.ceil(math.log2(float(max_index))) if grain_exact else max_index.bit_length()
    bits = max(bits + bits % 2, 16)
    return 64 if bits > 62 else bits


def grain_block_is_short(max_index: int) -> bool:
    """True where Grain's shuffle of ``[0, max_index]`` is no permutation (its block is one bit
    short: ``max_index == 2**k``, ``k >= 16`` even), so the two modes' orders differ."""
    return max_index > 0 and _block_bits(max_index, True) != _block_bits(max_index, False)


def _check_rounds(rounds: Any) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)):
        raise TypeError(f"rounds must be an int, got {type(rounds).__name__} {rounds!r}.")
    r = int(rounds)
    if r < 4 or r > 1024 or r % 2:
        raise ValueError(f"rounds must be an even integer between 4 and 1024, but got rounds = {r}")
    return r


# At most this many indices are cycle-walked one by one on Python ints rather than as an array
# (a numpy pass has a fixed cost of a few microseconds per operation, whatever the size).
_SCALAR_WALK = 24
# A 16-bit-block shuffle walks indices one by one (65,536 / (max_index + 1) cipher steps each on
# average, ~0.2 us a step) until their expected steps reach this many, then maps through its whole
# table (~1 ms to build): random access into many windows (a window shuffle read in a shuffled
# order) does not build a table per element, and a shuffle asked for many indices builds it once.
_STEPS_BEFORE_TABLE = 4096


class IndexShuffle:
    """Grain's ``index_shuffle`` as a reusable, vectorised bijection on ``[0, max_index]``.

    ``shuffle(i)`` equals ``index_shuffle(i, max_index, seed, rounds)``; ``shuffle(array)`` maps an
    integer array elementwise. Memory is O(1) in ``max_index``: blocks of up to 16 bits (indices
    below 65,537) walk their first few indices one by one, then map through one cached
    table of at most 65,537 entries; larger ones cycle walk the cipher over the requested indices
    only.
    """

    def __init__(
        self, max_index: int, seed: int, rounds: int = SHUFFLE_ROUNDS, *, grain_exact: bool | None = None
    ):
        max_index = operator.index(max_index)
        if max_index < 0:
            raise ValueError(f"max_index must be >= 0, got {max_index}.")
        if max_index >= 2**63:
            raise ValueError(f"max_index must be < 2**63, got {max_index}.")
        self.max_index = max_index
        self.seed = validate_seed(seed)
        self.rounds = _check_rounds(rounds)
        self.grain_exact = _grain_exact_now() if grain_exact is None else bool(grain_exact)
        self._half = _block_bits(max_index, self.grain_exact) // 2 if max_index else 8
        self._keys = _seed_seq_words(self.seed, self.rounds)
        self._int_keys = tuple(k & ((1 << self._half) - 1) for k in self._keys)
        # 16-bit blocks: each double round as (xor before the table lookup, xor after it)
        self._key_pairs = tuple(
            (self._int_keys[i] << 8, self._int_keys[i + 1]) for i in range(0, self.rounds, 2)
        )
        self._table: np.ndarray | None = None
        self._walked = 0  # indices walked one by one before the table is built
        self._fk: tuple[list[int], ...] | None = None  # keyed round lists of narrow words

    def _encrypt_array(self, x: np.ndarray) -> np.ndarray:
        """One pass of the cipher over a uint64 array (:meth:`_walk_int` is the same on one int).
        Words of up to 16 bits (indices below 2**32) look the round function up in a table."""
        w = self._half
        mask, ww = np.uint64((1 << w) - 1), np.uint64(w)
        if w <= _TABLE_WORD_BITS:
            f = _round_table(w)
            lw = ((x >> ww) & mask).astype(np.int64)
            rw = (x & mask).astype(np.int64)
            int_keys = self._int_keys
            for i in range(0, len(int_keys), 2):
                lw ^= f.take(rw)
                lw ^= int_keys[i]
                rw ^= f.take(lw)
                rw ^= int_keys[i + 1]
            lw <<= w
            lw |= rw
            return lw.astype(np.uint64)
        one, two, eight = np.uint64(1), np.uint64(2), np.uint64(8)
        keys = [np.uint64(k) for k in self._int_keys]

        def rotl(v, r):
            return ((v << r) & mask) | (v >> (ww - r))

        left = (x >> ww) & mask
        right = x & mask
        for i in range(0, len(keys), 2):
            left = left ^ ((rotl(right, one) & rotl(right, eight)) ^ rotl(right, two)) ^ keys[i]
            right = right ^ ((rotl(left, one) & rotl(left, eight)) ^ rotl(left, two)) ^ keys[i + 1]
        return (left << ww) | right

    def _decrypt(self, x: int) -> int:
        w = self._half
        mask = (1 << w) - 1
        keys = [k & mask for k in self._keys]

        def f(v: int) -> int:
            def rotl(u: int, r: int) -> int:
                return ((u << r) & mask) | (u >> (w - r))

            return (rotl(v, 1) & rotl(v, 8)) ^ rotl(v, 2)

        left, right = (x >> w) & mask, x & mask
        for i in range(len(keys) - 2, -1, -2):
            right ^= f(left) ^ keys[i + 1]
            left ^= f(right) ^ keys[i]
        return (left << w) | right

    def _check_index(self, i: int) -> None:
        if not 0 <= i <= self.max_index:
            raise ValueError(
                f"index must be in [0, max_index], but got index = {i} and max_index = {self.max_index}"
            )

    def __call__(self, index: Any) -> Any:
        if isinstance(index, np.ndarray):
            return self._map_array(index)
        i = operator.index(index)
        self._check_index(i)
        if self.max_index == 0:
            return 0
        if self._half == 8:
            table = self._small_map(1)
            return self._walk_int16(i) if table is None else int(table[i])
        return self._walk_int(i)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_table"], state["_walked"], state["_fk"] = None, 0, None  # derived: rebuilt in use
        return state

    def _small_map(self, count: int) -> np.ndarray | None:
        """A 16-bit block's whole map, once the indices this shuffle has been asked for (``count``
        more now) would take ``_STEPS_BEFORE_TABLE`` cipher steps to walk; None before (walk them
        one by one)."""
        if self._table is None:
            self._walked += count
            if self._walked * (1 << 16) < _STEPS_BEFORE_TABLE * (self.max_index + 1):
                return None
            self._table = _small_table(self.max_index, self.seed, self.rounds)
        return self._table

    def _walk_int16(self, x: int) -> int:
        """Cycle-walks one index of a 16-bit block: a double round is a lookup in the shared
        double-round table between two key xors (the top index of ``max_index == 2**16`` is
        truncated to 16 bits, as in Grain)."""
        table = _DOUBLE_ROUND_16_LIST
        pairs = self._key_pairs
        top = min(self.max_index, 0xFFFF)
        x &= 0xFFFF
        while True:
            for before, after in pairs:
                x = table[x ^ before] ^ after
            if x <= top:
                return x

    def _walk_int(self, x: int) -> int:
        """Cycle-walks one index on Python ints: encrypts ``x`` until it is in range (words of up
        to 16 bits look the round function up in a list)."""
        w = self._half
        mask = (1 << w) - 1
        keys = self._int_keys
        top = self.max_index
        if w <= _KEYED_LIST_BITS:
            if self._fk is None:  # round i's function xor its key, as lists
                self._fk = tuple(t.tolist() for t in _keyed_round_tables(w, keys))
            fk = self._fk
            while True:
                left, right = (x >> w) & mask, x & mask  # a short block drops the top bit
                for i in range(0, len(fk), 2):
                    left ^= fk[i][right]
                    right ^= fk[i + 1][left]
                x = (left << w) | right
                if x <= top:
                    return x
        if w <= _TABLE_WORD_BITS:
            rf = _round_list(w)
            while True:
                left, right = (x >> w) & mask, x & mask  # a short block drops the top bit
                for i in range(0, len(keys), 2):
                    left ^= rf[right] ^ keys[i]
                    right ^= rf[left] ^ keys[i + 1]
                x = (left << w) | right
                if x <= top:
                    return x
        while True:
            left, right = (x >> w) & mask, x & mask
            for i in range(0, len(keys), 2):
                f = (((right << 1) & mask) | (right >> (w - 1))) & (
                    ((right << 8) & mask) | (right >> (w - 8))
                ) ^ (((right << 2) & mask) | (right >> (w - 2)))
                left ^= f ^ keys[i]
                f = (((left << 1) & mask) | (left >> (w - 1))) & (
                    ((left << 8) & mask) | (left >> (w - 8))
                ) ^ (((left << 2) & mask) | (left >> (w - 2)))
                right ^= f ^ keys[i + 1]
            x = (left << w) | right
            if x <= top:
                return x

    def _map_words(self, flat: np.ndarray) -> np.ndarray:
        """Cycle-walks int64 indices of <= 16-bit words: halves kept split between passes, only
        the indices still walking go on, the last few one by one (a pass costs ~the same for 3 as 300)."""
        w = self._half
        f = _round_table(w)
        keys = self._int_keys
        top = self.max_index
        out = np.empty_like(flat)
        pending = np.arange(flat.size)
        mask = (1 << w) - 1
        lw = (flat >> w) & mask  # a short block drops the top bit
        rw = flat & mask
        keyed = _keyed_round_tables(w, keys) if w <= _KEYED_TABLE_BITS else None
        while True:
            if keyed is not None:  # round i's function xor its key: one gather a round
                for i in range(0, len(keyed), 2):
                    lw ^= keyed[i].take(rw)
                    rw ^= keyed[i + 1].take(lw)
            else:
                for i in range(0, len(keys), 2):
                    lw ^= f.take(rw)
                    lw ^= keys[i]
                    rw ^= f.take(lw)
                    rw ^= keys[i + 1]
            cur = lw << w
            cur |= rw
            walking = cur > top
            out[pending] = cur  # final for the landed ones, overwritten later for the others
            pending = pending[walking]
            if pending.size <= _SCALAR_WALK:
                break
            lw, rw = lw[walking], rw[walking]
        for p, c in zip(pending.tolist(), cur[walking].tolist()):
            out[p] = self._walk_int(c)
        return out

    def _map_array(self, indices: np.ndarray) -> np.ndarray:
        flat = np.asarray(indices).reshape(-1)
        if flat.size == 0:
            return np.zeros(np.shape(indices), dtype=np.int64)
        lo, hi = int(flat.min()), int(flat.max())
        if lo < 0 or hi > self.max_index:
            self._check_index(lo if lo < 0 else hi)
        if self.max_index == 0:
            return np.zeros(np.shape(indices), dtype=np.int64)
        if self._half == 8:
            table = self._small_map(flat.size)
            if table is None:
                walked = map(self._walk_int16, flat.tolist())
                return np.fromiter(walked, np.int64, count=flat.size).reshape(np.shape(indices))
            return table[flat.astype(np.int64)].astype(np.int64).reshape(np.shape(indices))
        if flat.size <= _SCALAR_WALK:
            return np.fromiter(
                map(self._walk_int, flat.tolist()), dtype=np.int64, count=flat.size
            ).reshape(np.shape(indices))
        if self._half <= _TABLE_WORD_BITS:
            return self._map_words(flat.astype(np.int64)).reshape(np.shape(indices))
        cur = flat.astype(np.uint64)
        out = np.empty_like(cur)
        pending = np.arange(cur.size)
        top = np.uint64(self.max_index)
        with np.errstate(over="ignore"):
            while pending.size > _SCALAR_WALK:
                cur = self._encrypt_array(cur)
                done = cur <= top
                out[pending[done]] = cur[done]
                pending, cur = pending[~done], cur[~done]
        # The few indices still walking go on one by one: a whole-array pass costs the same
        # for 3 indices as for 300.
        for p, c in zip(pending.tolist(), cur.tolist()):
            out[p] = self._walk_int(c)
        return out.astype(np.int64).reshape(np.shape(indices))

    def inverse(self, index: int) -> int:
        """Returns ``i`` with ``self(i) == index`` (for blocks where Grain's map is a bijection)."""
        j = operator.index(index)
        self._check_index(j)
        if self.max_index == 0:
            return 0
        while True:
            j = self._decrypt(j)
            if j <= self.max_index:
                return j


_TABLE_WORD_BITS = 16  # words up to this wide use a table of the round function (512 KiB at most)


# Words up to this wide fold each round key into a copy of the round function (cache: 16 key sets)
_KEYED_LIST_BITS = 10
_KEYED_TABLE_BITS = 12


@functools.lru_cache(maxsize=16)
def _keyed_round_tables(w: int, keys: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Per round ``i``: the round function on every ``w``-bit word xor ``keys[i]`` (int64)."""
    f = _round_table(w)
    return tuple(f ^ k for k in keys)


@functools.cache
def _round_list(w: int) -> list[int]:
    """:func:`_round_table` as a list of Python ints (for walks on Python ints)."""
    return _round_table(w).tolist()


@functools.cache
def _round_table(w: int) -> np.ndarray:
    """Simon's round function ``(rotl(v, 1) & rotl(v, 8)) ^ rotl(v, 2)`` on every ``w``-bit word
    (int64, read-only)."""
    v = np.arange(1 << w, dtype=np.int64)
    mask = (1 << w) - 1

    def rotl(u: np.ndarray, r: int) -> np.ndarray:
        return ((u << r) & mask) | (u >> (w - r))

    table = (rotl(v, 1) & rotl(v, 8)) ^ rotl(v, 2)
    table.flags.writeable = False
    return table


def _double_round_16() -> np.ndarray:
    """Two Feistel half-rounds with zero keys on every 16-bit value ``v = (L << 8) | R``:
    ``L ^= F(R)``, then ``R ^= F(L)`` (``F``: Simon's round function on 8-bit words); a
    ``(256, 256)`` int64 table indexed ``[L, R]``, read-only.

    Round keys only xor a half, so the double round with keys ``(a, b)`` is
    ``A[v ^ (a << 8)] ^ b``: the whole 16-bit cipher is a few lookups in this one table.
    """
    f = _round_table(8)
    v = np.arange(1 << 16, dtype=np.int64)
    left = (v >> 8) ^ f[v & 0xFF]
    table = (left << 8) | ((v & 0xFF) ^ f[left])
    table = table.reshape(256, 256)
    table.flags.writeable = False
    return table


_DOUBLE_ROUND_16 = _double_round_16()
_DOUBLE_ROUND_16_FLAT = _DOUBLE_ROUND_16.reshape(-1)
_DOUBLE_ROUND_16_LIST = _DOUBLE_ROUND_16_FLAT.tolist()  # for walks on Python ints
_HIGH_BYTES = np.arange(256, dtype=np.intp)


def _encrypt_domain_16(key_bytes: Sequence[int], out: np.ndarray, scratch: np.ndarray, tag: int = 0) -> None:
    """Writes the 16-bit-block cipher of every value ``0..65535`` (round keys ``key_bytes``, one
    byte each, an even number) into ``out``, xored with ``tag`` (bits above the 16 of a value:
    e.g. a table number). ``out`` and ``scratch`` are int64 arrays of 65,536 entries.

    The first double round permutes the table's rows (its key xors the high byte of every value
    of the domain); each further one is one gather, its first key folded into the previous
    round's second.
    """
    k = key_bytes
    cur, other = scratch, out
    np.take(_DOUBLE_ROUND_16, _HIGH_BYTES ^ k[0], axis=0, out=cur.reshape(256, 256), mode="wrap")
    for i in range(2, len(k), 2):
        cur ^= k[i - 1] | (k[i] << 8)
        np.take(_DOUBLE_ROUND_16_FLAT, cur, out=other, mode="wrap")
        cur, other = other, cur
    np.bitwise_xor(cur, k[-1] | tag, out=out)


@functools.lru_cache(maxsize=32)
def _small_table(max_index: int, seed: int, rounds: int) -> np.ndarray:
    """The whole map of a 16-bit-block shuffle: every index's first landing in ``[0, max_index]``.

    Sizes the walk suits (:func:`_walk_tables`) walk; the others encrypt the 65,536-value domain
    once (:func:`_encrypt_domain_16`), then follow the cipher's cycles by pointer doubling
    (``jump = jump[jump]`` for values still outside the range) until every in-range start has
    landed.
    """
    if _WALK_MIN_SIZE <= max_index + 1 <= _WALK_MAX_SIZE:
        return _walk_tables(max_index, [seed], rounds)[0]
    keys = [k & 0xFF for k in _seed_seq_words(seed, rounds)]
    jump = np.empty(1 << 16, np.int64)
    _encrypt_domain_16(keys, jump, np.empty(1 << 16, np.int64))
    limit = min(max_index, (1 << 16) - 1)
    active = np.flatnonzero(jump > limit)
    while (jump[: limit + 1] > limit).any():
        landed = jump[jump[active]]
        jump[active] = landed
        active = active[landed > limit]
    table = jump[: limit + 1]
    if max_index == 1 << 16:  # the top index is truncated to 16 bits: it lands where 0 does
        table = np.append(table, table[0])
    return table.astype(np.int64)


# From this many indices per table up to the next, walking cycles beats pointer doubling (below,
# walks of 65,536 / n steps on average are too long; above, pointer doubling needs few rounds).
_WALK_MIN_SIZE = 32
_WALK_MAX_SIZE = 32768
_WALK_TABLES = 8  # tables walked together: 8 x 512 KiB of step table stay in cache


def shuffle_tables(
    max_index: int, seeds: Sequence[int], rounds: int = SHUFFLE_ROUNDS, *, grain_exact: bool | None = None
) -> np.ndarray:
    """Grain's whole permutation of ``[0, max_index]`` for each of ``seeds``, as rows of an
    ``(len(seeds), max_index + 1)`` int64 array: row ``r`` is ``IndexShuffle(max_index,
    seeds[r], rounds)(np.arange(max_index + 1))``.

    Many seeds at once is much cheaper than one table per seed where ``max_index`` uses a 16-bit
    block (``max_index <= 65536``, e.g. window shuffles): every index walks its cipher cycle until
    it lands in range, eight tables in the same numpy calls (for 32 to 32,768 indices; other
    sizes use :class:`IndexShuffle` per seed). Memory: the result plus about 5 MiB of working
    buffers.
    """
    max_index = operator.index(max_index)
    seeds = [validate_seed(x) for x in seeds]
    rounds = _check_rounds(rounds)
    n = max_index + 1
    if not seeds:
        return np.zeros((0, max(n, 0)), dtype=np.int64)
    if not _WALK_MIN_SIZE <= n <= _WALK_MAX_SIZE:
        span = np.arange(n, dtype=np.int64)
        return np.stack([IndexShuffle(max_index, x, rounds, grain_exact=grain_exact)(span) for x in seeds])
    return _walk_tables(max_index, seeds, rounds)


def _walk_tables(max_index: int, seeds: Sequence[int], rounds: int) -> np.ndarray:
    """:func:`shuffle_tables` for 16-bit blocks: encrypt all 65,536 values of every table, then
    walk each in-range start's cycle until it lands in range.

    Seeds go in groups of ``_WALK_TABLES`` through buffers allocated once per call and reused
    (about 4.5 MiB for a group of 8: the step tables and one scratch table). The step table holds
    *global* positions (table number times 65,536 plus the value), so a walk step is one gather
    over the group; in-range values map to themselves, so a landed walk stays put.
    """
    n = max_index + 1
    count = len(seeds)
    group = min(_WALK_TABLES, count)
    jump = np.empty((group, 1 << 16), np.int64)
    scratch = np.empty(1 << 16, np.int64)
    base = (np.arange(group, dtype=np.int64) << 16)[:, None]
    fixed = base + np.arange(n, dtype=np.int64)  # in-range values: themselves
    out = np.empty((count, n), np.int64)
    for lo in range(0, count, group):
        w = min(group, count - lo)
        for t, seed in enumerate(seeds[lo : lo + w]):
            keys = [k & 0xFF for k in _seed_seq_words(seed, rounds)]
            _encrypt_domain_16(keys, jump[t], scratch, tag=t << 16)
        res = out[lo : lo + w]
        res[:] = jump[:w, :n]  # each in-range index's first cipher step
        jump[:w, :n] = fixed[:w]
        flat = jump[:w].reshape(-1)
        step = res.reshape(-1)
        pend = np.flatnonzero((step & 0xFFFF) >= n)
        vals = step[pend]
        while pend.size:
            for _ in range(24):  # several steps between compactions: fewer numpy calls
                vals = flat.take(vals, mode="wrap")  # all in range: wrap skips the checks
            step[pend] = vals  # final for the landed walks, overwritten later for the others
            keep = (vals & 0xFFFF) >= n
            pend, vals = pend[keep], vals[keep]
    out &= 0xFFFF
    return out


def index_shuffle(
    index: int, max_index: int, seed: int, rounds: int = SHUFFLE_ROUNDS, *, grain_exact: bool | None = None
) -> int:
    """The position of ``index`` in Grain's seeded permutation of ``[0, max_index]``.

    Same arguments, results and errors as ``grain.experimental.index_shuffle`` (for
    ``max_index == 2**k``, ``k >= 16`` even, only with ``grain_exact``: see the module docstring).
    """
    idx, top = operator.index(index), operator.index(max_index)
    r = _check_rounds(rounds)
    if not 0 <= idx <= top:
        raise ValueError(f"index must be in [0, max_index], but got index = {idx} and max_index = {top}")
    exact = _grain_exact_now() if grain_exact is None else bool(grain_exact)
    return _cached_shuffle(top, validate_seed(seed), r, exact)(idx)


@functools.lru_cache(maxsize=64)
def _cached_shuffle(max_index: int, seed: int, rounds: int, grain_exact: bool) -> IndexShuffle:
    return IndexShuffle(max_index, seed, rounds, grain_exact=grain_exact)


class IndexPermutation:
    """Epoch ``epoch`` of Grain's global shuffle of ``n`` elements seeded ``seed``.

    ``perm(i)`` is ``index_shuffle(i, n - 1, (seed + epoch) % 2**32, rounds=4, grain_exact=...)``;
    ``perm(array)`` maps an integer array elementwise. Memory is O(1) in ``n``.
    """

    def __init__(
        self, n: int, seed: int, epoch: int = 0, rounds: int = SHUFFLE_ROUNDS, *, grain_exact: bool | None = None
    ):
        n = operator.index(n)
        if n < 0:
            raise ValueError(f"permutation size must be >= 0, got {n}.")
        if n > 2**63:
            raise ValueError(f"permutation size must be <= 2**63, got {n}.")
        self.n = n
        self.seed = (validate_seed(seed) + operator.index(epoch)) % 2**32
        self._shuffle = IndexShuffle(max(n - 1, 0), self.seed, rounds, grain_exact=grain_exact)

    def __call__(self, index: Any) -> Any:
        if isinstance(index, np.ndarray):
            if index.size and (int(index.min()) < 0 or int(index.max()) >= self.n):
                bad = int(index.min()) if int(index.min()) < 0 else int(index.max())
                raise IndexError(f"index {bad} out of range for a permutation of {self.n}.")
            return self._shuffle(index)
        i = operator.index(index)
        if not 0 <= i < self.n:
            raise IndexError(f"index {i} out of range for a permutation of {self.n}.")
        return self._shuffle(i)

    def inverse(self, index: int) -> int:
        """Returns ``i`` such that ``self(i) == index``."""
        j = operator.index(index)
        if not 0 <= j < self.n:
            raise IndexError(f"index {j} out of range for a permutation of {self.n}.")
        return self._shuffle.inverse(j)
