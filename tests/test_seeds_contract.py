"""The seed contract: derivation, per-element randomness and the index permutation."""

import subprocess
import sys

import numpy as np
import pytest

import grain_core as grain
from grain_core import seeds, shuffle_cipher


def test_permutation_is_bijection_and_vectorised():
    for n in [1, 2, 3, 10, 97, 1000, 4097]:
        perm = shuffle_cipher.IndexPermutation(n, seed=5, epoch=2)
        out = perm(np.arange(n))
        assert sorted(out.tolist()) == list(range(n))
        assert [perm(i) for i in range(n)] == out.tolist()
        assert all(perm.inverse(perm(i)) == i for i in range(min(n, 50)))


def test_permutation_depends_on_seed_and_epoch():
    n = 1000
    a = shuffle_cipher.IndexPermutation(n, 1, 0)(np.arange(n))
    assert not np.array_equal(a, shuffle_cipher.IndexPermutation(n, 2, 0)(np.arange(n)))
    assert not np.array_equal(a, shuffle_cipher.IndexPermutation(n, 1, 1)(np.arange(n)))


def test_global_shuffle_of_2_pow_40():
    ds = grain.MapDataset.range(2**40).shuffle(seed=3)
    idx = [0, 1, 2**39, 2**40 - 1]
    values = [ds[i] for i in idx]
    assert all(0 <= v < 2**40 for v in values)
    assert len(set(values)) == 4
    assert ds.__getitems__(idx) == values
    it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0)))
    first = [next(it) for _ in range(5)]
    assert first == [ds[i] for i in range(5)]


def test_element_rng_is_pure():
    a = seeds.element_rng(7, 3).integers(0, 2**31, size=4)
    b = seeds.element_rng(7, 3).integers(0, 2**31, size=4)
    c = seeds.element_rng(7, 4).integers(0, 2**31, size=4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_same_output_in_another_process():
    code = (
        "import grain_core as g;"
        "ds=g.MapDataset.range(50).seed(11).shuffle().random_map(lambda x,r:int(r.integers(1000)));"
        "print(list(ds))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    ds = grain.MapDataset.range(50).seed(11).shuffle().random_map(lambda x, r: int(r.integers(1000)))
    assert out.stdout.strip() == str(list(ds))


def test_derive_seed_range_and_sensitivity():
    vals = {seeds.derive_seed((1,), i) for i in range(100)}
    assert len(vals) == 100 and all(0 <= v < 2**32 for v in vals)
    assert seeds.derive_seed((1, 2), 0) != seeds.derive_seed((2, 1), 0)


def test_random_map_same_result_in_threads_and_bulk():
    ds = grain.MapDataset.range(200).seed(1).random_map(lambda x, r: int(r.integers(10**9)))
    single = [ds[i] for i in range(200)]
    assert ds.__getitems__(list(range(200))) == single
    threaded = list(ds.to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=10)))
    assert threaded == single


@pytest.mark.parametrize("n", [0, 2**63 + 1])
def test_permutation_size_bounds(n):
    if n == 0:
        assert shuffle_cipher.IndexPermutation(0, 1).n == 0
    else:
        with pytest.raises(ValueError):
            shuffle_cipher.IndexPermutation(n, 1)


def test_element_rngs_match_element_rng():
    rngs = seeds.ElementRngs(99)
    for i in [0, 1, 7, 2**40]:
        expected = seeds.element_rng(99, i).integers(0, 2**31, size=6)
        assert np.array_equal(rngs(i).integers(0, 2**31, size=6), expected)


def test_random_map_stages_pickle_and_run_in_workers():
    import pickle

    rngs = pickle.loads(pickle.dumps(seeds.ElementRngs(5)))
    assert np.array_equal(rngs(3).integers(0, 100, 4), seeds.element_rng(5, 3).integers(0, 100, 4))
    ds = grain.MapDataset.range(6).random_map(lambda x, r: x + int(r.integers(100)), seed=0)
    mp = ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
    assert list(mp) == list(ds)
