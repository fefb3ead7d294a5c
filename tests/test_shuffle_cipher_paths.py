"""IndexShuffle's array paths (numpy passes, then a one-by-one tail) and its scalar walk agree,
and both invert to the round-by-round decryption, for every block width and Grain's short blocks.

Grain's own orders are pinned by recorded outputs (tests/test_correct_by_default.py,
tests/integration/compat_semantics); this pins the fast paths against each other and the cipher.
"""

import numpy as np
import pytest

from grain_core import shuffle_cipher
from grain_core.shuffle_cipher import IndexShuffle, grain_block_is_short

# 16-bit blocks, table-word blocks (18..32 bits), Grain's short blocks (2**18, 2**20, 2**32 with
# grain_exact) and a wide block (rotations on uint64)
SIZES = [65_537, 99_999, 2**18, 2**18 + 1, 10**6, 2**20, 10**7, 2**31 - 1, 2**32, 2**32 + 7, 10**12]


def _indices(max_index: int, count: int) -> np.ndarray:
    rng = np.random.default_rng(max_index % 1000 + count)
    picked = rng.integers(0, max_index + 1, size=count, dtype=np.int64)
    picked[: min(3, count)] = [max_index, 0, max_index - 1][: min(3, count)]
    return picked


@pytest.mark.parametrize("max_index", SIZES)
@pytest.mark.parametrize("grain_exact", [True, False])
@pytest.mark.parametrize("count", [1, shuffle_cipher._SCALAR_WALK, shuffle_cipher._SCALAR_WALK + 1, 300])
def test_array_equals_scalar_and_inverts(max_index, grain_exact, count):
    shuffle = IndexShuffle(max_index, 1234, grain_exact=grain_exact)
    idx = _indices(max_index, count)
    got = shuffle(idx)
    assert got.dtype == np.int64 and got.shape == idx.shape
    assert got.tolist() == [shuffle(i) for i in idx.tolist()]
    assert all(0 <= v <= max_index for v in got.tolist())
    short = grain_exact and grain_block_is_short(max_index)
    for i, v in zip(idx.tolist(), got.tolist()):
        if short and i == max_index:
            assert v == shuffle(0)  # Grain's short block: the top index aliases index 0
        else:
            assert shuffle.inverse(v) == i


def test_array_shape_is_kept():
    shuffle = IndexShuffle(10**6, 7)
    idx = _indices(10**6, 120).reshape(4, 30)
    assert np.array_equal(shuffle(idx), shuffle(idx.reshape(-1)).reshape(4, 30))
