"""HuggingFaceIterDataset against real streaming ``datasets.IterableDataset`` objects built locally."""

from __future__ import annotations

import functools

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from grain_plugin_hf import (
    HuggingFaceIterDataset,
    NotResumableError,
    resplit_states,
    resplit_worker_state,
)
from hf_testdata import table_dict

import grain_core as grain
from grain_core import testing

pytestmark = pytest.mark.timeout(300)
N, SHARDS = 36, 6


def _stream(start=0, shards=SHARDS):
    return datasets.Dataset.from_dict(table_dict(N, start)).to_iterable_dataset(num_shards=shards)


def _gen(shards):
    for s in shards:  # datasets hands each shard its list of gen_kwargs values
        for i in range(s * 5, s * 5 + 5):
            yield {"label": i, "text": f"g{i}"}


def _generator_stream():
    return datasets.IterableDataset.from_generator(_gen, gen_kwargs={"shards": list(range(4))})


def _labels(rows):
    return [int(r["label"]) for r in rows]


def test_registered_and_reads_the_dataset_in_order():
    assert grain.experimental.HuggingFaceIterDataset is HuggingFaceIterDataset
    ds = HuggingFaceIterDataset(_stream())
    assert isinstance(ds, grain.IterDataset) and ds.num_shards == SHARDS
    assert _labels(ds) == list(range(N)) == _labels(_stream())
    rows = list(HuggingFaceIterDataset(_stream().with_format("numpy")))
    assert isinstance(rows[0]["tokens"], np.ndarray)


@pytest.mark.parametrize("make", [_stream, _generator_stream], ids=["arrow", "generator"])
def test_exact_restore_in_process(make):
    testing.assert_equal_output_after_checkpoint(HuggingFaceIterDataset(make()))


def test_streaming_local_parquet_files(tmp_path, hf_cache):
    files = []
    for f in range(3):
        path = tmp_path / f"part-{f}.parquet"
        pq.write_table(pa.table(table_dict(10, 100 * f)), path, row_group_size=4)
        files.append(str(path))
    stream = datasets.load_dataset(
        "parquet", data_files=files, split="train", streaming=True, cache_dir=hf_cache
    )
    ds = HuggingFaceIterDataset(stream)
    assert ds.num_shards == 3
    assert sorted(_labels(ds)) == sorted(_labels(stream))
    testing.assert_equal_output_after_checkpoint(ds)


def test_processes_split_the_shards_and_resplit_exactly():
    full = set(range(N))
    shard = grain.sharding.ShardOptions
    its = [iter(HuggingFaceIterDataset(_stream(), shard_options=shard(p, 2))) for p in range(2)]
    read = []
    for it in its:  # processes read different amounts, mid-shard
        read += _labels(next(it) for _ in range(7))
    states = [it.get_state() for it in its]
    for p2 in range(3):  # 2 -> 3 processes
        it = iter(HuggingFaceIterDataset(_stream(), shard_options=shard(p2, 3)))
        with pytest.raises(grain.state.StateMismatchError, match="resplit_states"):
            it.set_state(states[0])
        it.set_state(resplit_states(states, p2, 3))
        read += _labels(it)
    assert sorted(read) == sorted(full)


def test_mp_prefetch_workers_split_shards_and_restore():
    options = grain.MultiprocessingOptions(num_workers=2)
    ds = HuggingFaceIterDataset(_stream())
    with iter(ds.mp_prefetch(options)) as it:
        head = _labels(next(it) for _ in range(11))
        state = it.get_state()
    with iter(ds.mp_prefetch(options)) as it:
        it.set_state(state)
        rest = _labels(it)
    assert sorted(head + rest) == list(range(N))
    with iter(ds.mp_prefetch(options)) as it:
        assert _labels(it) == head + rest  # the same order every run


def test_another_dataset_is_refused():
    it = iter(HuggingFaceIterDataset(_stream()))
    next(it)
    other = iter(HuggingFaceIterDataset(_stream(shards=4)))
    before = other.get_state()
    with pytest.raises(grain.state.StateMismatchError, match="another dataset"):
        other.set_state(it.get_state())
    assert other.get_state() == before
    feats = iter(HuggingFaceIterDataset(_stream().select_columns(["label"])))
    with pytest.raises(grain.state.StateMismatchError, match="another dataset"):
        feats.set_state(it.get_state())


def test_shuffle_buffer_cannot_be_resumed():
    ds = HuggingFaceIterDataset(_stream().shuffle(seed=1, buffer_size=8))
    it = iter(ds)
    next(it)
    state = it.get_state()
    assert len(list(it)) == N - 1  # iterating is fine
    with pytest.raises(NotResumableError, match="shuffle buffer"):
        iter(ds).set_state(state)


def test_bad_input_is_refused_clearly():
    with pytest.raises(TypeError, match="HuggingFaceDataSource"):
        HuggingFaceIterDataset(datasets.Dataset.from_dict(table_dict(3)))
    with pytest.raises(TypeError, match="IterableDataset"):
        HuggingFaceIterDataset([1, 2])
    with pytest.raises(TypeError, match="ShardOptions"):
        HuggingFaceIterDataset(_stream(), shard_options=(0, 2))
    from datasets.distributed import split_dataset_by_node

    with pytest.raises(ValueError, match="ShardByJaxProcess"):
        HuggingFaceIterDataset(split_dataset_by_node(_stream(), rank=0, world_size=2))


def _make(start=0):
    return HuggingFaceIterDataset(_stream(start))


def test_stage_conforms():
    testing.check_stage(functools.partial(_make), foreign=functools.partial(_make, 1000))


@pytest.mark.parametrize(("k", "k2"), [(2, 3), (3, 1), (0, 2), (2, 0)])
def test_restore_into_another_worker_count(k, k2):
    ds = HuggingFaceIterDataset(_stream())

    def make(workers):
        return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers)) if workers else ds

    it = iter(make(k))
    head = _labels(next(it) for _ in range(13))
    state = it.get_state()
    getattr(it, "close", lambda: None)()
    it2 = iter(make(k2))
    if k != k2:
        with pytest.raises(grain.state.StateMismatchError):
            it2.set_state(state)  # refused as it is: the split differs
    it2.set_state(resplit_worker_state(state, ds, k2))
    rest = _labels(it2)
    getattr(it2, "close", lambda: None)()
    assert sorted(head + rest) == list(range(N))


def test_resplit_needs_the_owning_readers():
    shard = grain.sharding.ShardOptions
    it = iter(HuggingFaceIterDataset(_stream(), shard_options=shard(0, 2)))
    next(it)
    with pytest.raises(grain.state.StateMismatchError, match="saved readers"):
        resplit_states([it.get_state()], 0, 3)  # reader 0 of 3 takes shard 3, owned by reader 1


_FAIL_AT = []  # labels at which the generator raises once


def _flaky_gen(shards):
    for s in shards:
        for i in range(s * 5, s * 5 + 5):
            if i in _FAIL_AT:
                _FAIL_AT.remove(i)
                raise RuntimeError(f"read error at {i}")
            yield {"label": i}


def test_an_error_inside_the_dataset_loses_nothing():
    stream = datasets.IterableDataset.from_generator(_flaky_gen, gen_kwargs={"shards": [0, 1, 2]})
    it = iter(HuggingFaceIterDataset(stream))
    _FAIL_AT[:] = [3, 11]
    out = []
    errors = 0
    while True:
        try:
            out.append(int(next(it)["label"]))
        except StopIteration:
            break
        except RuntimeError:
            errors += 1
    assert errors == 2 and out == list(range(15))


def test_ctrl_c_inside_the_dataset_loses_nothing():
    stream = datasets.Dataset.from_dict({"label": list(range(120))}).to_iterable_dataset(num_shards=3)
    it = iter(HuggingFaceIterDataset(stream))
    import grain_plugin_hf

    out, _ = testing.drain_with_interrupts(it, packages=(grain, grain_plugin_hf, datasets))
    assert _labels(out) == list(range(120))
    rest = iter(HuggingFaceIterDataset(stream))
    rest.set_state(it.get_state())
    assert list(rest) == []


def test_generator_datasets_are_told_apart():
    a = HuggingFaceIterDataset(_generator_stream())
    b = HuggingFaceIterDataset(
        datasets.IterableDataset.from_generator(_flaky_gen, gen_kwargs={"shards": list(range(4))})
    )
    assert a.identity == HuggingFaceIterDataset(_generator_stream()).identity
    assert a.identity != b.identity
