"""The compatibility names behave as google grain 0.2.18's.

Expected values come from ``data/grain_0_2_18_outputs.json``, recorded from google grain 0.2.18 by
``record_grain_outputs.py`` (run manually in a side venv); grain is not needed here.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import pathlib
import pickle

import numpy as np
import pytest

import grain_core as grain
import grain_core.python as pg
from grain_core.records import Record, RecordMetadata
from grain_core.state import StateMismatchError

G = json.loads((pathlib.Path(__file__).parent / "data" / "grain_0_2_18_outputs.json").read_text())


def _plain(x):
    if isinstance(x, np.ndarray):
        return {"array": x.tolist(), "dtype": str(x.dtype)}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in sorted(x.items())}
    if isinstance(x, np.generic):
        return x.item()
    return x


def _records(values):
    return [Record(RecordMetadata(index=i, record_key=i + 100), v) for i, v in enumerate(values)]


def _dump(recs):
    return [
        {"index": r.metadata.index, "record_key": r.metadata.record_key, "data": _plain(r.data)}
        for r in recs
    ]


# --- experimental ----------------------------------------------------------------------------------


def test_rng_pool_draws_grains_numbers():
    pool = grain.experimental.RngPool(42)
    for case in G["rng_pool"]:
        rng = pool.acquire_rng(case["index"], op_seed=case["op_seed"])
        assert rng.integers(0, 2**62, size=3).tolist() == case["integers"]
        pool.release_rng(rng)  # a reused generator gives the same numbers
        again = pool.acquire_rng(case["index"], op_seed=case["op_seed"])
        assert again.integers(0, 2**62, size=3).tolist() == case["integers"]
    assert (
        pickle.loads(pickle.dumps(pool)).acquire_rng(0).integers(0, 2**62, size=3).tolist()
        == (G["rng_pool"][0]["integers"])
    )


@pytest.mark.parametrize(
    "case",
    G["elastic_iterator"],
    ids=lambda c: (
        f"gbs{c['global_batch_size']}-{c['shard_index']}of{c['shard_count']}-w{c['num_workers']}"
    ),
)
def test_elastic_iterator_batches_and_states_are_grains(case):
    ds = grain.MapDataset.range(10).map(lambda x: x + 1)
    opts = (
        grain.MultiprocessingOptions(num_workers=case["num_workers"])
        if case["num_workers"]
        else None
    )
    shard = grain.ShardOptions(case["shard_index"], case["shard_count"])
    it = grain.experimental.ElasticIterator(
        ds, case["global_batch_size"], shard, multiprocessing_options=opts
    )
    states = [it.get_state()]
    batches = []
    for b in it:
        batches.append(b.tolist())
        states.append(it.get_state())
    it.close()
    assert batches == case["batches"]
    assert [s["global_next_index"] for s in states] == [
        s["global_next_index"] for s in case["states"]
    ]
    # Grain's own states restore here.
    for k, grain_state in enumerate(case["states"]):
        fresh = grain.experimental.ElasticIterator(ds, case["global_batch_size"], shard)
        fresh.set_state(grain_state)
        assert [b.tolist() for b in fresh] == case["batches"][k:]


@pytest.mark.parametrize(
    "before, after", [((32, 64), (16, 32)), ((8, 128), (64, 128)), ((4, 64), (6, 96))]
)
def test_elastic_iterator_resizes_without_losing_or_repeating(before, after):
    # Grain's elastic_iterator_test scenarios: advance every shard 7 steps, restore any shard's
    # state on another shard count (and global batch size), read to the end.
    ds = grain.MapDataset.range(4096).map(lambda x: x * 2).shuffle(42)
    n, gbs = before
    seen = []
    its = [grain.experimental.ElasticIterator(ds, gbs, grain.ShardOptions(i, n)) for i in range(n)]
    for it in its:
        for _ in range(7):
            seen += next(it).tolist()
    state = its[3].get_state()
    assert all(it.get_state() == state for it in its)
    n2, gbs2 = after
    for i in range(n2):
        it = grain.experimental.ElasticIterator(ds, gbs2, grain.ShardOptions(i, n2))
        it.set_state(state)
        for batch in it:
            seen += batch.tolist()
    assert len(seen) == len(set(seen))
    # Every element is read except the final incomplete global batch.
    assert len(seen) > len(ds) - gbs2 and set(seen) <= set(ds)


def test_elastic_iterator_refuses_bad_input_early():
    ds = grain.MapDataset.range(10)
    with pytest.raises(ValueError, match="does not support `filter`"):
        grain.experimental.ElasticIterator(ds.filter(lambda x: x % 2), 2, grain.NoSharding())
    with pytest.raises(ValueError, match="not divisible by shard count 4"):
        grain.experimental.ElasticIterator(ds, 6, grain.ShardOptions(0, 4))
    with pytest.raises(TypeError, match="MapDataset"):
        grain.experimental.ElasticIterator(ds.to_iter_dataset(), 2, grain.NoSharding())
    it = grain.experimental.ElasticIterator(ds, 2, grain.NoSharding())
    next(it)
    before = it.get_state()
    with pytest.raises(StateMismatchError, match="20 elements"):
        it.set_state({**before, "length": 20})
    with pytest.raises(StateMismatchError, match="global_next_index"):
        it.set_state({"next_index": 3})
    assert it.get_state() == before and next(it).tolist() == [2, 3]


def test_elastic_iterator_checkpoints_through_assert_equal_output_after_checkpoint():
    ds = grain.MapDataset.range(100).map(lambda x: x * 2).shuffle(42)
    grain.experimental.assert_equal_output_after_checkpoint(
        grain.experimental.ElasticIterator(ds, 5, grain.NoSharding())
    )


def test_element_specs_are_grains():
    class WithSpec(grain.transforms.Map):
        def map(self, x):
            return {"x": np.full((3,), x, np.float32)}

        def output_spec(self, input_spec):
            return {"x": grain.experimental.ShapeDtypeStruct(shape=(3,), dtype=np.float32)}

    r = grain.MapDataset.range(10)
    got = {
        "range": r,
        "range_batch3": r.batch(3),
        "range_batch3_drop": r.batch(3, drop_remainder=True),
        "map_spec_batch": r.shuffle(1).map(WithSpec()).batch(2, drop_remainder=True),
        "iter_map_spec": r.to_iter_dataset().map(WithSpec()).batch(4),
    }

    def enc(spec):
        return json.loads(
            json.dumps(
                spec, default=lambda s: {"shape": list(s.shape), "dtype": np.dtype(s.dtype).name}
            )
        )

    for name, ds in got.items():
        assert enc(grain.experimental.get_element_spec(ds)) == G["element_specs"][name], name
    with pytest.raises(ValueError, match="output_spec"):
        grain.experimental.get_element_spec(r.map(lambda x: x))
    with pytest.raises(NotImplementedError, match="custom batching"):
        grain.experimental.get_element_spec(r.batch(2, batch_fn=list))


def test_multithread_prefetch_order_and_checkpoint_are_grains():
    ds = grain.MapDataset.range(11).map(lambda x: x * 2).to_iter_dataset()
    mt = grain.experimental.multithread_prefetch(ds, 3, 2)
    assert list(mt) == G["multithread_prefetch_3"]
    grain.experimental.assert_equal_output_after_checkpoint(mt)
    assert grain.experimental.multithread_prefetch(ds, 0, 2) is ds
    # sequential_slice: thread i reads the contiguous block i of [0, 4), [4, 8), [8, 11).
    seq = grain.experimental.multithread_prefetch(ds, 3, 2, sequential_slice=True)
    assert [int(x) for x in seq] == [0, 8, 16, 2, 10, 18, 4, 12, 20, 6, 14]
    grain.experimental.assert_equal_output_after_checkpoint(seq)


def test_cache_iter_dataset_replays_as_grain_does():
    ds = grain.experimental.CacheIterDataset(grain.MapDataset.range(5).to_iter_dataset())
    it = iter(ds)
    first = [int(next(it)) for _ in range(3)]
    st = it.get_state()
    rest = [int(x) for x in it]
    it.set_state(st)
    again = [int(x) for x in it]
    assert {"first": first, "rest": rest, "again_from_state": again} == {
        k: G["cache"][k] for k in ("first", "rest", "again_from_state")
    }
    assert set(G["cache"]["state_keys"]) <= set(st)
    # A fresh iterator given a filled-cache state rebuilds the cache from the parent.
    done = it.get_state()
    assert done["cache_filled"]
    fresh = iter(ds)
    fresh.set_state({**st, "cache_filled": True})
    assert [int(x) for x in fresh] == G["cache"]["rest"]
    grain.experimental.assert_equal_output_after_checkpoint(ds)


def test_zip_strict_by_default_as_grain():
    a, b = grain.MapDataset.range(3).to_iter_dataset(), grain.MapDataset.range(5).to_iter_dataset()
    with pytest.raises(ValueError) as e:
        list(grain.experimental.ZipIterDataset([a, b]))
    assert str(e.value).startswith(G["zip_strict_error"])
    got = [list(map(int, t)) for t in grain.experimental.ZipIterDataset([a, b], strict=False)]
    assert got == G["zip_not_strict"]
    with pytest.raises(ValueError, match="argument 2 is shorter than argument 1"):
        list(grain.experimental.ZipIterDataset([b, a]))


def test_repeat_without_reseeding_repeats_the_first_epoch():
    base = (
        grain.MapDataset.range(4)
        .shuffle(seed=7)
        .random_map(lambda x, rng: (x, int(rng.integers(1000))))
    )
    rep = base.repeat(3, reseed_each_epoch=False)
    assert len(rep) == G["repeat_no_reseed_len"]
    epochs = [list(rep[i * 4 : (i + 1) * 4]) for i in range(3)]
    assert epochs[0] == epochs[1] == epochs[2] == list(base)
    reseeded = list(base.repeat(3))
    assert reseeded[4:8] != reseeded[:4]


def test_dataset_options_take_grains_fields():
    opts = grain.experimental.DatasetOptions(
        execution_tracking_mode=grain.experimental.ExecutionTrackingMode.STAGE_TIMING,
        min_shm_size=64,
    )
    assert opts.min_shm_size == 64
    with pytest.raises(TypeError, match="ExecutionTrackingMode"):
        grain.experimental.DatasetOptions(execution_tracking_mode="STAGE_TIMING")


# --- legacy grain.python ---------------------------------------------------------------------------


def test_legacy_operations_give_grains_records(caplog):
    data = [{"a": np.arange(3) + i, "b": i} for i in range(5)]
    with caplog.at_level(logging.ERROR):
        got = {
            "map": _dump(pg.MapOperation(lambda d: d["b"] * 2)(iter(_records(data)))),
            "filter": _dump(pg.FilterOperation(lambda d: d["b"] % 2 == 0)(iter(_records(data)))),
            "batch_2": _dump(pg.BatchOperation(2)(iter(_records(data)))),
            "batch_2_drop": _dump(pg.BatchOperation(2, drop_remainder=True)(iter(_records(data)))),
        }
    assert got == G["operations"]
    assert "deprecated PyGrain MapOperation" in caplog.text
    with pytest.raises(ValueError, match="error when calling map function") as e:
        list(pg.MapOperation(lambda d: 1 / 0)(iter(_records([1]))))
    assert isinstance(e.value.__cause__, ZeroDivisionError)
    with pytest.raises(TypeError, match="Record structures do not match"):
        list(pg.BatchOperation(2)(iter(_records([{"a": 1}, {"b": 2}]))))
    with pytest.raises(ValueError, match="positive integer"):
        pg.BatchOperation(0)


def test_pack_and_batch_operation_packs_as_grain():
    seqs = [
        {"tokens": np.arange(n) + 10 * n, "mask": np.ones(n, dtype=np.int32)}
        for n in (3, 2, 4, 1, 5, 2)
    ]
    op = grain.experimental.PackAndBatchOperation(
        length_struct={"tokens": 6, "mask": 6}, batch_size=2
    )
    assert _dump(op(iter(_records(seqs)))) == G["pack_and_batch"]
    op = grain.experimental.PackAndBatchOperation(
        length_struct={"tokens": 6, "mask": 6}, batch_size=2, max_sequences_per_bin=1
    )
    assert _dump(op(iter(_records(seqs)))) == G["pack_and_batch_max1"]
    with pytest.raises(ValueError, match="truncated to max length"):
        list(op(iter(_records([{"tokens": np.arange(7), "mask": np.ones(7)}]))))


def test_data_loader_accepts_legacy_operations():
    loader = pg.DataLoader(
        data_source=list(range(8)),
        sampler=pg.IndexSampler(8, shard_options=pg.NoSharding(), shuffle=False, num_epochs=1),
        operations=[
            pg.MapOperation(lambda x: x + 1),
            pg.FilterOperation(lambda x: x % 2 == 0),
            pg.BatchOperation(2),
        ],
    )
    assert [b.tolist() for b in loader] == [[2, 4], [6, 8]]


def test_data_loader_iterator_takes_grains_arguments():
    loader = pg.DataLoader(
        data_source=list(range(6)),
        sampler=pg.IndexSampler(6, shard_options=pg.NoSharding(), shuffle=False, num_epochs=1),
    )
    it = iter(loader)
    next(it), next(it)
    resumed = pg.PyGrainDatasetIterator(loader, it.get_state())
    resumed.start_prefetch()
    assert list(resumed) == [2, 3, 4, 5]


def test_in_memory_data_source_is_shared_memory():
    with pg.InMemoryDataSource([1, "a", b"x", 2.5]) as src:
        items = [src[i].decode() if isinstance(src[i], bytes) else src[i] for i in range(len(src))]
        assert {"len": len(src), "items": items, "str_prefix": str(src).split("(")[0]} == G[
            "shared_memory_source"
        ]
        other = pickle.loads(pickle.dumps(src))  # attaches by name, no copy
        assert other.shm.name == src.shm.name and other[1] == "a"
        other.close()
        name = src.shm.name
        assert list(grain.MapDataset.source(src)) == [1, "a", b"x", 2.5]
    assert not os.path.exists(f"/dev/shm/{name}")
    with pytest.raises(ValueError, match="elements"):
        grain.sources.SharedMemoryDataSource()


def test_shared_memory_array_crosses_pickle_and_is_unlinked():
    arr = pg.SharedMemoryArray((2, 3), np.int32)
    arr[:] = np.arange(6).reshape(2, 3)
    md = arr.metadata
    other = pickle.loads(pickle.dumps(arr))
    assert isinstance(other, grain.multiprocessing.SharedMemoryArray) and other.sum() == 15
    assert type(arr + 1) is np.ndarray  # arithmetic results live in ordinary memory
    other.unlink_on_del()
    del other, arr
    assert not os.path.exists(f"/dev/shm/{md.name}")


def test_config_update_and_refusals():
    cfg = grain.config
    assert pg.config is cfg
    try:
        cfg.update("py_debug_mode", True)
        assert cfg.py_debug_mode is True
        with pytest.raises(TypeError, match="bool"):
            cfg.update("py_debug_mode", "yes")
        assert cfg.py_debug_mode is True
        cfg.update("py_dataset_visualization_output_dir", pathlib.Path("/tmp/viz"))
        assert cfg.py_dataset_visualization_output_dir == "/tmp/viz"
    finally:
        cfg.update("py_debug_mode", False)
        cfg.update("py_dataset_visualization_output_dir", None)
    with pytest.raises(ValueError, match="Unrecognized config option: nope"):
        cfg.update("nope", 1)
    with pytest.raises(ValueError, match="update"):
        cfg.py_debug_mode = True
    from grain_core.global_config import Config

    assert Config({"GRAIN_PY_DEBUG_MODE": "1"}).py_debug_mode is True


def test_monitoring_metrics_keep_values():
    c = grain.monitoring.Counter(
        "/test/compat/counter", grain.monitoring.Metadata("d"), fields=[("name", str)]
    )
    c.Increment("a")
    c.IncrementBy(4, "a")
    assert c.Get("a") == 5 and c.Get("b") == 0
    grain.monitoring.record_bytes_read_and_latency("src", num_bytes=10, latency_ns=5, num_reads=2)
    root = grain.monitoring.get_monitoring_root()
    assert root.get("/grain/python/data_sources/bytes_read").Get("src") >= 10
    with pytest.raises(ValueError, match="field"):
        c.Increment()


def test_constants_are_grains():
    assert grain.constants.META_FEATURES == {
        "_index",
        "_record_key",
        "_dataset_index",
        "_epoch",
        "_seed",
        "_record",
    }
    assert pg.RECORD_KEY == "_record_key"


def test_elastic_iterator_checkpoint_files_restore_on_another_process_count(tmp_path):
    # MaxText saves one state file per JAX process; restoring on fewer processes reads them all.
    from grain_core.checkpoint import CheckpointProcessCountError, write_state_file
    from grain_core.checkpoint.files import restore_across_process_counts

    ds = grain.MapDataset.range(64).shuffle(seed=5)
    before = [grain.experimental.ElasticIterator(ds, 8, grain.ShardOptions(p, 4)) for p in range(4)]
    seen = []
    for p, it in enumerate(before):
        for _ in range(3):
            seen += next(it).tolist()
        write_state_file(tmp_path, it.get_state(), p, 4)
    for p in range(2):
        it = grain.experimental.ElasticIterator(ds, 8, grain.ShardOptions(p, 2))
        restore_across_process_counts(it, tmp_path, p, 2)
        seen += [x for batch in it for x in batch.tolist()]
    assert sorted(seen) == list(range(64))

    lagging = tmp_path / "lagging"
    for p, it in enumerate(before):
        if p == 0:
            next(it)
        write_state_file(lagging, it.get_state(), p, 4)
    it = grain.experimental.ElasticIterator(ds, 8, grain.ShardOptions(0, 2))
    with pytest.raises(CheckpointProcessCountError, match="different positions"):
        restore_across_process_counts(it, lagging, 0, 2)
    assert it.get_state()["global_next_index"] == 0


def test_elastic_iterator_through_orbax_with_the_legacy_pygrain_names(tmp_path):
    import orbax.checkpoint as ocp  # the kernel's [orbax] extra, installed for its tests
    ds = pg.MapDataset.range(40)
    it = pg.experimental.ElasticIterator(ds, 4, pg.ShardOptions(0, 1))
    next(it), next(it)
    handlers = {"data": pg.PyGrainCheckpointHandler()}
    with ocp.CheckpointManager(tmp_path, item_handlers=handlers) as mngr:
        mngr.save(1, args=ocp.args.Composite(data=pg.PyGrainCheckpointSave(it)), force=True)
        mngr.wait_until_finished()
    resumed = pg.experimental.ElasticIterator(ds, 8, pg.ShardOptions(0, 2))  # another shard count
    with ocp.CheckpointManager(tmp_path, item_handlers={"data": pg.PyGrainCheckpointHandler()}) as mngr:
        mngr.restore(1, args=ocp.args.Composite(data=pg.PyGrainCheckpointRestore(resumed)))
    assert resumed.get_state()["global_next_index"] == 8
    assert next(resumed).tolist() == [8, 10, 12, 14]


def test_compat_stages_pass_the_conformance_kit():
    # Local functions travel by value to the fresh process of check_state_round_trip_in_fresh_process.
    def elastic(n=40):
        ds = grain.MapDataset.range(n).shuffle(seed=1)
        return grain.experimental.ElasticIterator(ds, 4, grain.ShardOptions(1, 2))

    def cache(n=9):
        return grain.experimental.CacheIterDataset(grain.MapDataset.range(n).to_iter_dataset())

    def multithread(n=11):
        ds = grain.MapDataset.range(n).map(lambda x: x * 2).to_iter_dataset()
        return grain.experimental.multithread_prefetch(ds, 3, 2)

    from grain_core import testing

    for make, other in ((elastic, 80), (cache, 30), (multithread, 30)):
        testing.check_stage(make, foreign=functools.partial(make, other))


def test_a_fractional_seed_is_refused_where_grain_truncates_it():
    """docs/differences.md: Grain 0.2.18 runs ``shuffle(seed=1.5)`` as ``seed=1``; we refuse it."""
    ds = grain.MapDataset.range(10)
    with pytest.raises(TypeError, match="seed must be an integer"):
        ds.shuffle(seed=1.5)
    assert list(ds.shuffle(seed=1)) == [5, 7, 6, 0, 4, 8, 9, 2, 1, 3]  # recorded from google grain 0.2.18


def test_batching_a_filtered_map_dataset_gives_short_batches():
    """docs/differences.md: Grain refuses ``MapDataset.filter(...).batch(...)``; we batch what passes."""
    ds = grain.MapDataset.range(10).filter(lambda x: x % 3).batch(3)
    assert [b.tolist() for b in ds] == [[1, 2], [4, 5], [7, 8]]


def test_map_dataset_classes_show_their_constructor_signature():
    """``inspect.signature`` of a MapDataset class is its constructor's, as in Grain (the
    metaclass that records constructions must not hide it behind ``(*args, **kwargs)``)."""
    import inspect

    assert list(inspect.signature(grain.MapDataset).parameters) == ["parents"]
    assert list(inspect.signature(grain.experimental.ZipMapDataset).parameters) == ["parents"]
    assert "transform" in inspect.signature(grain.experimental.FlatMapMapDataset).parameters
