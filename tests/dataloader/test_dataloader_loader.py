"""DataLoader: operations, sharding, epochs, state, context managers, workers and bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import (
    AddNoise,
    CountingSource,
    Even,
    PlusOne,
    Square,
    Tag,
    Twice,
    as_list,
)

import grain_core as grain
from grain_core.state import StateMismatchError

Batch = grain.transforms.Batch


def loader(n=20, ops=(), workers=0, source=None, **sampler_kwargs):
    source = list(range(n)) if source is None else source
    sampler_kwargs.setdefault("num_epochs", 1)  # Grain's IndexSampler repeats forever by default
    sampler = grain.IndexSampler(num_records=len(source), **sampler_kwargs)
    return grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=list(ops),
        worker_count=workers,
        read_options=grain.ReadOptions(num_threads=2, prefetch_buffer_size=16),
    )


def flat(items):
    out = []
    for x in items:
        out.extend(np.asarray(x).reshape(-1).tolist())
    return out


def test_operations_in_order():
    dl = loader(10, [PlusOne(), Square(), Batch(4)])
    assert [as_list(b) for b in dl] == [[1, 4, 9, 16], [25, 36, 49, 64], [81, 100]]
    dl = loader(10, [PlusOne(), Batch(4, drop_remainder=True)])
    assert [as_list(b) for b in dl] == [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_filter_then_batch_and_flat_map():
    assert [as_list(b) for b in loader(12, [Even(), Batch(4)])] == [[0, 2, 4, 6], [8, 10]]
    assert list(loader(3, [Twice()])) == [0, 0, 1, 1, 2, 2]
    assert [as_list(b) for b in loader(3, [Twice(), PlusOne(), Batch(4)])] == [
        [1, 1, 2, 2],
        [3, 3],
    ]


def test_random_map_uses_the_sampler_rng():
    dl = loader(10, [AddNoise()], shuffle=True, seed=4, num_epochs=2)
    out = list(dl)
    sampler = dl.sampler
    expected = [
        (sampler[i].record_key, int(sampler[i].rng.integers(0, 1_000_000))) for i in range(20)
    ]
    assert out == expected
    assert out == list(loader(10, [AddNoise()], shuffle=True, seed=4, num_epochs=2))
    assert len({r for _, r in out}) > 15


def test_map_with_index_sees_the_position():
    dl = loader(5, [Tag()], num_epochs=2)
    assert list(dl) == [(i, i % 5) for i in range(10)]


def test_random_map_needs_a_seed():
    with pytest.raises(ValueError, match="seed"):
        loader(5, [AddNoise()])


def test_epochs_and_per_epoch_shuffle():
    out = list(loader(50, shuffle=True, seed=1, num_epochs=3))
    epochs = [out[0:50], out[50:100], out[100:150]]
    assert all(sorted(e) == list(range(50)) for e in epochs)
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]
    assert out == list(loader(50, shuffle=True, seed=1, num_epochs=3))
    assert out != list(loader(50, shuffle=True, seed=2, num_epochs=3))


def test_infinite_epochs():
    it = iter(loader(7, shuffle=True, seed=0, num_epochs=None))
    got = [next(it) for _ in range(70)]
    assert all(sorted(got[i : i + 7]) == list(range(7)) for i in range(0, 70, 7))
    it.close()


@pytest.mark.parametrize("grain_exact", [False, True])
@pytest.mark.parametrize("drop", [False, True])
def test_sampler_shards_disjoint_and_covering(drop, grain_exact):
    with grain.config.override(grain_exact=grain_exact):
        outs = [
            list(loader(23, shard_options=grain.ShardOptions(i, 3, drop_remainder=drop), shuffle=True, seed=3))
            for i in range(3)
        ]
    sets = [set(o) for o in outs]
    assert all(len(o) == len(s) for o, s in zip(outs, sets))
    assert not (sets[0] & sets[1]) and not (sets[1] & sets[2]) and not (sets[0] & sets[2])
    if drop or grain_exact:
        # As in Grain 0.2.18, each shard's DataLoader reads len(sampler) // shard_count = 7
        # positions, so without drop_remainder the 8-record shards leave their last record unread.
        assert [len(o) for o in outs] == [7, 7, 7]
        if not drop:
            assert len(set(range(23)) - set().union(*sets)) == 2
    else:  # correct by default: every record of every shard once
        assert [len(o) for o in outs] == [8, 8, 7]
        assert set().union(*sets) == set(range(23))


@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("grain_exact", [False, True])
def test_loader_shard_options(drop, grain_exact):
    outs = []
    for i in range(3):
        with grain.config.override(grain_exact=grain_exact):
            dl = grain.DataLoader(
                data_source=list(range(10)),
                sampler=grain.IndexSampler(10, num_epochs=1),
                shard_options=grain.ShardOptions(i, 3, drop_remainder=drop),
            )
        outs.append(list(dl))
    if drop or grain_exact:
        # Grain reads len(sampler) // shard_count positions per shard: record 9 is not read.
        assert outs[0] == [0, 3, 6]
        assert sorted(sum(outs, [])) == list(range(9))
    else:  # correct by default: every position of the shard
        assert outs[0] == [0, 3, 6, 9]
        assert sorted(sum(outs, [])) == list(range(10))


def test_batching_is_per_shard():
    outs = [
        [as_list(b) for b in loader(10, [Batch(3)], shard_options=grain.ShardOptions(i, 2))]
        for i in range(2)
    ]
    assert outs == [[[0, 1, 2], [3, 4]], [[5, 6, 7], [8, 9]]]


def test_state_is_json_bytes_and_restores_exactly():
    dl = loader(30, [PlusOne(), Batch(4)], shuffle=True, seed=2, num_epochs=2)
    it = iter(dl)
    for _ in range(5):
        next(it)
    state = it.get_state()
    assert isinstance(state, bytes)
    assert json.loads(state)["kind"] == "DataLoaderIterator"
    rest = [as_list(b) for b in it]
    it2 = iter(dl)
    it2.set_state(state)
    assert [as_list(b) for b in it2] == rest
    # restoring into a fresh loader of the same configuration
    it3 = iter(loader(30, [PlusOne(), Batch(4)], shuffle=True, seed=2, num_epochs=2))
    it3.set_state(state)
    assert [as_list(b) for b in it3] == rest


def test_state_after_filter_and_flat_map():
    dl = loader(40, [Even(), Twice(), Batch(3)], shuffle=True, seed=5)
    it = iter(dl)
    next(it), next(it)
    state = it.get_state()
    rest = [as_list(b) for b in it]
    it2 = iter(dl)
    it2.set_state(state)
    assert [as_list(b) for b in it2] == rest


def test_state_from_another_pipeline_is_refused():
    state = iter(loader(10, shuffle=True, seed=1)).get_state()
    it = iter(loader(10, shuffle=True, seed=2))
    with pytest.raises(StateMismatchError):
        it.set_state(state)
    with pytest.raises(StateMismatchError):
        it.set_state(b"not json")


def test_context_manager_opened_once_and_closed():
    src = CountingSource(10)
    dl = loader(source=src, ops=[PlusOne()])
    assert (src.entered, src.exited) == (0, 0)
    assert list(dl) == list(range(1, 11))
    assert (src.entered, src.exited) == (1, 1)
    it = iter(dl)
    next(it)
    assert (src.entered, src.exited) == (2, 1)
    it.close()
    it.close()
    assert (src.entered, src.exited) == (2, 2)
    with pytest.raises(RuntimeError):
        next(it)
    with iter(dl) as it:
        next(it)
    assert (src.entered, src.exited) == (3, 3)


def test_set_state_after_the_end_reopens():
    src = CountingSource(6)
    dl = loader(source=src)
    it = iter(dl)
    next(it)
    state = it.get_state()
    assert list(it) == [1, 2, 3, 4, 5]
    assert src.entered == src.exited == 1
    it.set_state(state)
    assert list(it) == [1, 2, 3, 4, 5]
    assert src.entered == src.exited == 2


def test_sources_with_bulk_reads():
    src = grain.sources.RangeDataSource(0, 20, 1)
    dl = grain.DataLoader(
        data_source=src, sampler=grain.IndexSampler(20, shuffle=True, seed=0, num_epochs=1),
        operations=[Batch(5)],
    )
    assert sorted(flat(dl)) == list(range(20))


def test_bad_inputs():
    with pytest.raises(ValueError, match="num_records=11.*10 records"):
        grain.DataLoader(data_source=list(range(10)), sampler=grain.IndexSampler(11))
    with pytest.raises(TypeError, match=r"operations\[1\] is a int"):
        grain.DataLoader(
            data_source=list(range(10)),
            sampler=grain.IndexSampler(10),
            operations=[PlusOne(), 3],
        )
    with pytest.raises(ValueError):
        Batch(0)
    with pytest.raises(ValueError):
        grain.DataLoader(
            data_source=list(range(10)), sampler=grain.IndexSampler(10), worker_count=-1
        )
    with pytest.raises(ValueError, match="shard_index"):
        grain.DataLoader(
            data_source=list(range(10)),
            sampler=grain.IndexSampler(10, grain.ShardOptions(3, 3)),
        )
    # As in Grain, the DataLoader's shard_options win over the sampler's.
    dl = grain.DataLoader(
        data_source=list(range(10)),
        sampler=grain.IndexSampler(10, grain.ShardOptions(0, 2), num_epochs=1),
        shard_options=grain.ShardOptions(1, 2),
    )
    assert list(dl) == [0, 1, 2, 3, 4]  # positions 1, 3, ... of the sampler: its shard 0
    # A sampler over fewer records than the source reads the first ones.
    dl = grain.DataLoader(data_source=list(range(10)), sampler=grain.IndexSampler(4, num_epochs=1))
    assert list(dl) == [0, 1, 2, 3]


def test_pygrain_alias_and_repr():
    assert grain.PyGrainDatasetIterator is grain.DataLoaderIterator
    dl = loader(4, [PlusOne(), Batch(2)])
    assert "IndexSampler(num_records=4" in repr(dl) and "PlusOne, Batch" in repr(dl)
    assert isinstance(iter(dl), grain.DataLoaderIterator)


# --- worker processes -------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_workers_cover_and_restore_exactly(workers, request):
    if workers:
        request.getfixturevalue("has_runtime")
    dl = loader(
        60, [PlusOne(), Batch(4)], workers=workers, shuffle=True, seed=11, num_epochs=2
    )
    it = iter(dl)
    head = [as_list(next(it)) for _ in range(7)]
    state = it.get_state()
    rest = [as_list(b) for b in it]
    assert sorted(flat(head + rest)) == sorted(list(range(1, 61)) * 2)
    it2 = iter(dl)
    it2.set_state(state)
    assert [as_list(b) for b in it2] == rest
    # Grain's order: worker w batches elements w, w + workers, ... and batches come in turn
    elements = list(loader(60, [PlusOne()], shuffle=True, seed=11, num_epochs=2))
    per_worker = [elements[w :: max(workers, 1)] for w in range(max(workers, 1))]
    batches = [[p[i : i + 4] for i in range(0, len(p), 4)] for p in per_worker]
    expected = [b[k] for k in range(max(map(len, batches))) for b in batches if k < len(b)]
    assert head + rest == expected


def test_workers_with_filter_batch_per_worker_restore(has_runtime):
    dl = loader(80, [AddNoise(), Batch(3)], workers=2, shuffle=True, seed=1)
    it = iter(dl)
    for _ in range(4):
        next(it)
    state = it.get_state()
    rest = [np.asarray(b).tolist() for b in it]
    it2 = iter(dl)
    it2.set_state(state)
    assert [np.asarray(b).tolist() for b in it2] == rest
    dl = loader(40, [Even(), Batch(3)], workers=2)
    got = flat(dl)
    assert sorted(got) == list(range(0, 40, 2))


def test_workers_context_manager(has_runtime):
    src = CountingSource(16)
    dl = loader(source=src, ops=[PlusOne()], workers=2)
    assert sorted(dl) == list(range(1, 17))
    assert (src.entered, src.exited) == (1, 1)


class ReverseSampler:
    """A custom sampler: only ``__len__`` and ``__getitem__``."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return grain.RecordMetadata(index=i, record_key=self.n - 1 - i)

    def __repr__(self):
        return f"ReverseSampler({self.n})"


def test_custom_sampler():
    dl = grain.DataLoader(data_source=list(range(6)), sampler=ReverseSampler(6), operations=[Tag()])
    assert list(dl) == [(0, 5), (1, 4), (2, 3), (3, 2), (4, 1), (5, 0)]


class Opener:
    """A source whose ``__enter__`` returns the object to read from."""

    def __init__(self):
        self.opened = None

    def __len__(self):
        return 4

    def __getitem__(self, i):
        raise AssertionError("the unopened source was read")

    def __enter__(self):
        self.opened = [10, 11, 12, 13]
        return self.opened

    def __exit__(self, *exc):
        self.opened = None


def test_entered_source_object_is_read():
    assert list(loader(source=Opener())) == [10, 11, 12, 13]
