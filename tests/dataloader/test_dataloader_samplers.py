"""IndexSampler and SequentialSampler."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

import grain_core as grain


def keys(sampler, n=None):
    n = len(sampler) if n is None else n
    return [sampler[i].record_key for i in range(n)]


def test_seed_002_sampler_examples():
    s = grain.IndexSampler(
        num_records=60000, shard_options=grain.NoSharding(), shuffle=False, num_epochs=1
    )
    assert len(s) == 60000 and keys(s, 5) == [0, 1, 2, 3, 4]
    pytest.importorskip("jax")
    s = grain.IndexSampler(
        num_records=1_000_000,
        shard_options=grain.ShardByJaxProcess(),
        shuffle=True,
        num_epochs=None,
        seed=42,
    )
    assert repr(s) == (
        "IndexSampler(num_records=1000000, shard_options=ShardByJaxProcess(drop_remainder=False), "
        "shuffle=True, num_epochs=None, seed=42)"
    )
    assert len(s) == sys.maxsize
    assert 0 <= s[10**12].record_key < 1_000_000


def test_metadata():
    s = grain.IndexSampler(10, shuffle=True, seed=3, num_epochs=2)
    m = s[12]
    assert isinstance(m, grain.RecordMetadata)
    assert m.index == 12 and m.record_key == s.record_key(12)
    assert m.rng.integers(0, 2**31) == s[12].rng.integers(0, 2**31)
    assert s[1].rng.integers(0, 2**31) != s[2].rng.integers(0, 2**31)
    assert grain.IndexSampler(10)[0].rng is None
    assert [m.index for m in s] == list(range(20))


def test_epochs_cover_all_records_and_reshuffle():
    s = grain.IndexSampler(100, shuffle=True, seed=7, num_epochs=3)
    k = keys(s)
    epochs = [k[0:100], k[100:200], k[200:300]]
    for e in epochs:
        assert sorted(e) == list(range(100))
    assert epochs[0] != epochs[1] != epochs[2]
    assert k == keys(grain.IndexSampler(100, shuffle=True, seed=7, num_epochs=3))
    assert k != keys(grain.IndexSampler(100, shuffle=True, seed=8, num_epochs=3))
    np.testing.assert_array_equal(s.record_keys(np.arange(300)), k)
    np.testing.assert_array_equal(s.record_keys([250, 3, 120]), [k[250], k[3], k[120]])


def test_no_shuffle_epochs():
    s = grain.IndexSampler(4, num_epochs=2)
    assert keys(s) == [0, 1, 2, 3, 0, 1, 2, 3]
    with pytest.raises(IndexError):
        s[8]
    with pytest.raises(IndexError):
        s[-1]


def shard_keys(sampler):
    """The records the DataLoader of the sampler's shard reads: positions k, k + count, ..."""
    so = sampler.shard_options
    return [sampler[i].record_key for i in range(so.shard_index, len(sampler), so.shard_count)]


@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_disjoint_and_covering(drop, shuffle):
    # Grain's positions are global: shard k reads positions k, k + count, ... of its sampler.
    n, count = 103, 4
    per_shard = []
    for i in range(count):
        s = grain.IndexSampler(
            n, grain.ShardOptions(i, count, drop_remainder=drop), shuffle=shuffle, seed=1,
            num_epochs=1,
        )
        lo, hi = s.shard_range
        k = shard_keys(s)[: hi - lo]
        assert len(set(k)) == len(k)
        assert sorted(k) == list(range(lo, hi))  # contiguous shard
        per_shard.append(set(k))
    for a in range(count):
        for b in range(a + 1, count):
            assert not per_shard[a] & per_shard[b]
    union = set().union(*per_shard)
    if drop:
        assert {len(p) for p in per_shard} == {n // count}
    else:
        assert union == set(range(n))


def test_shuffle_within_shard_per_epoch():
    s = grain.IndexSampler(40, grain.ShardOptions(1, 2), shuffle=True, seed=5, num_epochs=None)
    k = [s[i].record_key for i in range(1, 80, 2)]
    e0, e1 = k[:20], k[20:]
    assert sorted(e0) == sorted(e1) == list(range(20, 40))
    assert e0 != e1


@pytest.mark.parametrize(
    "kwargs,err",
    [
        (dict(num_records=10, shuffle=True), ValueError),
        (dict(num_records=0), ValueError),
        (dict(num_records=-3), ValueError),
        (dict(num_records=10, num_epochs=0), ValueError),
        (dict(num_records=10, seed=-1), ValueError),
        (dict(num_records=10, seed="1"), TypeError),
        (dict(num_records=10, shard_options=(0, 1)), TypeError),
    ],
)
def test_bad_sampler_arguments(kwargs, err):
    with pytest.raises(err):
        grain.IndexSampler(**kwargs)


def test_sequential_sampler_and_pickle():
    s = grain.SequentialSampler(5, grain.ShardOptions(1, 2))
    assert keys(s) == [0, 1, 2, 3, 4]  # as in Grain: the DataLoader steps over positions
    assert shard_keys(s) == [1, 3]
    assert repr(s).startswith("SequentialSampler(num_records=5")
    t = grain.IndexSampler(50, shuffle=True, seed=9, num_epochs=2)
    t[3]
    u = pickle.loads(pickle.dumps(t))
    assert u == t and keys(u) == keys(t)
    assert isinstance(t, grain.Sampler)


def test_record_and_metadata():
    m = grain.RecordMetadata(index=3, record_key=7)
    r = grain.Record(metadata=m, data=b"x")
    assert r.data == b"x" and r.metadata.rng is None
    assert m.remove_record_key().record_key is None


class _UnsizedSampler:
    """Grain's ``Sampler`` protocol: ``__getitem__`` only; ``IndexError`` ends the epoch."""

    def __init__(self, end):
        self.end = end
        self.calls = 0

    def __getitem__(self, index):
        self.calls += 1
        if index >= self.end:
            raise IndexError(index)
        return grain.RecordMetadata(index=index, record_key=(index * 7) % self.end, rng=None)

    def __repr__(self):
        return f"_UnsizedSampler({self.end})"


@pytest.mark.parametrize("end", [0, 1, 2, 3, 17, 64, 1000])
def test_sampler_without_len_ends_the_epoch_at_its_index_error(end):
    source = list(range(1000))
    loader = grain.DataLoader(data_source=source, sampler=_UnsizedSampler(end),
                              shard_options=grain.NoSharding())
    assert list(loader) == [(i * 7) % end for i in range(end)]


@pytest.mark.parametrize("grain_exact", [False, True])
def test_sampler_without_len_with_workers_and_shards(grain_exact):
    """Each shard reads every shard_count-th position until the sampler's IndexError (Grain 0.2.18,
    under grain_exact: ``len // shard_count`` of them, so position 10 is not read); the workers
    batch within themselves."""
    source = list(range(100))
    got = []
    for shard in range(2):
        with grain.config.override(grain_exact=grain_exact):
            loader = grain.DataLoader(
                data_source=source, sampler=_UnsizedSampler(11), worker_count=2,
                shard_options=grain.ShardOptions(shard_index=shard, shard_count=2),
            )
        got += list(loader)
    assert sorted(got) == sorted((i * 7) % 11 for i in range(10 if grain_exact else 11))


def test_finding_the_end_of_a_sampler_without_len_is_logarithmic():
    sampler = _UnsizedSampler(10**6)
    loader = grain.DataLoader(data_source=list(range(10**6)), sampler=sampler,
                              shard_options=grain.NoSharding())
    assert 0 < sampler.calls <= 2 * 21 + 2
    it = iter(loader)
    assert next(it) == 0
