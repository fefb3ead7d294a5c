"""Seed 002's DataLoader / load / ArrayRecord examples on real ArrayRecord files (written with
array_record's writer), read through ``grain_core.ArrayRecordDataSource``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import grain_core as grain

pytest.importorskip("array_record")
pytest.importorskip("grain_plugin_arrayrecord")

N_FILES, PER_FILE = 2, 150


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from array_record.python.array_record_module import ArrayRecordWriter

    d = tmp_path_factory.mktemp("seed_dataloader")
    paths = []
    for f in range(N_FILES):
        path = str(d / f"train-{f:05d}.arrayrecord")
        w = ArrayRecordWriter(path, "group_size:1")
        for i in range(PER_FILE):
            rid = f * PER_FILE + i
            w.write(np.asarray([rid] * 4, dtype=np.int32).tobytes())
        w.close()
        paths.append(path)
    return paths


@dataclasses.dataclass
class DecodeAndAugment(grain.transforms.Map):
    def map(self, record: bytes):
        arr = np.frombuffer(record, dtype=np.int32)
        return {"features": arr, "id": arr[0]}


@dataclasses.dataclass
class Decode(grain.transforms.Map):
    def map(self, record: bytes):
        return int(np.frombuffer(record, dtype=np.int32)[0])


def test_arrayrecord_source_examples(shards):
    source = grain.ArrayRecordDataSource(shards[0])
    assert len(source) == PER_FILE
    source = grain.ArrayRecordDataSource(shards)
    assert len(source) == N_FILES * PER_FILE
    assert np.frombuffer(source[42], dtype=np.int32)[0] == 42
    source = grain.ArrayRecordDataSource(
        [str(shards[0]).replace("00000", "*")], reader_options={"index_storage_option": "in_memory"}
    )
    assert len(source) == N_FILES * PER_FILE


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_example(shards, workers):
    source = grain.ArrayRecordDataSource(shards)
    sampler = grain.IndexSampler(
        num_records=len(source),
        shard_options=grain.ShardByJaxProcess(),
        shuffle=True,
        num_epochs=None,
        seed=42,
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[DecodeAndAugment(), grain.transforms.Batch(batch_size=32, drop_remainder=True)],
        worker_count=workers,
        worker_buffer_size=2,
    )
    iterator = iter(loader)
    state = iterator.get_state()
    assert isinstance(state, bytes)
    batches = [next(iterator) for _ in range(12)]
    ids = np.concatenate([b["id"] for b in batches]).tolist()
    if workers == 0:
        assert sorted(ids[:300]) == list(range(300))
    else:  # Grain's order: each worker batches every other position, so epochs interleave
        assert set(ids) == set(range(300))
    assert all(b["features"].shape == (32, 4) for b in batches)
    mid = iterator.get_state()
    more = [next(iterator)["id"].tolist() for _ in range(3)]
    iterator.close()
    it2 = iter(loader)
    it2.set_state(mid)
    assert [next(it2)["id"].tolist() for _ in range(3)] == more
    it2.set_state(state)
    np.testing.assert_array_equal(next(it2)["id"], batches[0]["id"])
    it2.close()


def test_load_example(shards):
    source = grain.ArrayRecordDataSource(shards)
    loader = grain.load(
        source=source,
        num_epochs=3,
        shuffle=True,
        seed=0,
        shard_options=grain.ShardByJaxProcess(),
        transformations=[Decode()],
        batch_size=64,
        drop_remainder=True,
        worker_count=2,
    )
    flat = np.concatenate(list(loader)).tolist()
    # Grain's order: each of the 2 workers batches its own 450 positions (7 full batches)
    assert len(flat) == 2 * (450 // 64) * 64
    assert set(flat) == set(range(300)) and max(flat.count(i) for i in range(300)) <= 3
    assert flat[:300] != flat[300:600]


def test_shards_disjoint_and_covering(shards):
    outs = []
    for i in range(3):
        loader = grain.load(
            grain.ArrayRecordDataSource(shards),
            num_epochs=1,
            shuffle=True,
            seed=1,
            shard_options=grain.ShardOptions(i, 3),
            transformations=[Decode()],
        )
        outs.append(list(loader))
    assert sorted(sum(outs, [])) == list(range(300))
    assert [len(o) for o in outs] == [100, 100, 100]
