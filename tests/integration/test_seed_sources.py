"""Seed 003's data-source examples and the source examples of seeds 002/004, with locally made
ArrayRecord / Parquet files standing in for /data/... and a locally built TFDS dataset (array_record
format, no download, no TensorFlow) standing in for MNIST / PneumoniaMNIST."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import grain_core as grain
from grain_core import testing

tfds = pytest.importorskip("tensorflow_datasets")
ar = pytest.importorskip("array_record.python.array_record_module")


def _need(namespace, name):
    """``namespace.name``; its plugin is installed in this session, so a missing name fails."""
    try:
        return getattr(namespace, name)
    except AttributeError as e:
        pytest.fail(f"{name} is missing although the integration session installs every plugin: {e}")


# --- local stand-ins -------------------------------------------------------------------------------


class SeedMnist(tfds.core.GeneratorBasedBuilder):
    """MNIST stand-in: 28x28x1 uint8 images (pixels = id % 256), label = id % 10."""

    VERSION = tfds.core.Version("1.0.0")
    SIZE = 40

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(shape=(28, 28, 1), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(self.SIZE), "test": self._generate_examples(8)}

    def _generate_examples(self, n):
        for i in range(n):
            yield i, {"image": np.full((28, 28, 1), i % 256, np.uint8), "label": i % 10}


class SeedPneumoniaMnist(SeedMnist):
    """PneumoniaMNIST stand-in: 2 classes."""

    SIZE = 24

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(shape=(28, 28, 1), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=2),
                }
            ),
        )

    def _generate_examples(self, n):
        for i in range(n):
            yield i, {"image": np.full((28, 28, 1), 200, np.uint8), "label": i % 2}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tfds"))
    for cls in (SeedMnist, SeedPneumoniaMnist):
        cls(data_dir=d, file_format="array_record").download_and_prepare()
    return d


@pytest.fixture(scope="module")
def arrayrecord_files(tmp_path_factory):
    """/data/train-0000{0,1}.arrayrecord stand-ins: 60 records each."""
    d = tmp_path_factory.mktemp("data")
    paths = []
    for f in range(2):
        p = str(d / f"train-{f:05d}.arrayrecord")
        w = ar.ArrayRecordWriter(p, "group_size:1")
        for i in range(60):
            w.write(b"%d" % (f * 60 + i))
        w.close()
        paths.append(p)
    return paths


@pytest.fixture(scope="module")
def parquet_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pq")
    paths = []
    for f in range(4):
        p = str(d / f"shard-{f}.parquet")
        ids = np.arange(f * 100, f * 100 + 30)
        pq.write_table(
            pa.table({"id": ids, "text": [f"doc {i}" for i in ids]}), p, row_group_size=8
        )
        paths.append(p)
    return paths


def _decode(record: bytes) -> int:
    return int(record)


# --- seed 003: data sources -------------------------------------------------------------------------


def test_seed003_range_data_source():
    range_data_source = grain.python.RangeDataSource(start=1, stop=10, step=2)
    assert list(range_data_source) == [1, 3, 5, 7, 9]


def test_seed003_arrayrecord_paths_and_file_instructions(arrayrecord_files):
    source = grain.sources.ArrayRecordDataSource(arrayrecord_files)
    assert len(source) == 120  # global index over both files
    instructions = [
        grain.sources.FileInstruction(arrayrecord_files[0], skip=10, take=5, examples_in_shard=60),
        grain.sources.FileInstruction(arrayrecord_files[1], skip=0, take=3, examples_in_shard=60),
    ]
    subset = grain.sources.ArrayRecordDataSource(instructions)
    assert [_decode(subset[i]) for i in range(len(subset))] == [10, 11, 12, 13, 14, 60, 61, 62]


def test_seed003_tfds_data_source(data_dir):
    tfds_data_source = tfds.data_source("seed_mnist", split="train[:75%]", data_dir=data_dir)
    assert len(tfds_data_source) == 30
    ds = grain.MapDataset.source(tfds_data_source)
    assert ds[0]["image"].shape == (28, 28, 1)
    assert "tensorflow" not in sys.modules


def test_seed003_parquet_data_source(parquet_files):
    parquet_data_source = grain.experimental.ParquetIterDataset(path=parquet_files[0])
    rows = list(parquet_data_source)
    assert [int(r["id"]) for r in rows] == list(range(30))
    testing.assert_equal_output_after_checkpoint(parquet_data_source)


def test_seed003_custom_source_with_context_manager_and_pickle(arrayrecord_files):
    import pickle

    with grain.sources.ArrayRecordDataSource(arrayrecord_files) as source:
        clone = pickle.loads(pickle.dumps(source))
        assert clone[119] == source[119] == b"119"


# --- seed 002: ArrayRecordDataSource, DataLoader, grain.load ------------------------------------------


def test_seed002_arrayrecord_data_source(arrayrecord_files):
    source = grain.ArrayRecordDataSource(arrayrecord_files[0])  # single file
    assert len(source) == 60
    source = grain.ArrayRecordDataSource(arrayrecord_files)  # multiple shards
    assert len(source) == 120
    pattern = arrayrecord_files[0].replace("train-00000", "train-*")
    source = grain.ArrayRecordDataSource(
        [pattern], reader_options={"index_storage_option": "in_memory"}
    )
    assert len(source) == 120
    record_bytes = source[42]
    assert record_bytes == b"42"


def test_seed002_arrayrecord_map_dataset_pipeline(arrayrecord_files):
    source = grain.ArrayRecordDataSource(arrayrecord_files)
    ds = (
        grain.MapDataset.source(source)
        .shuffle(seed=0)
        .map(_decode)
        .batch(batch_size=16)
        .to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=32))
    )
    assert sorted(np.concatenate(list(ds)).tolist()) == list(range(120))
    testing.assert_equal_output_after_checkpoint(ds)
    mp = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    it = iter(mp)
    try:
        assert sorted(np.concatenate(list(it)).tolist()) == list(range(120))
    finally:
        it.close()


@dataclasses.dataclass
class Decode(grain.transforms.Map):
    def map(self, record: bytes):
        return int(record)


def test_seed002_data_loader_and_load(arrayrecord_files):
    pattern = arrayrecord_files[0].replace("train-00000", "train-*")
    source = grain.ArrayRecordDataSource([pattern])
    sampler = grain.IndexSampler(
        num_records=len(source),
        shard_options=grain.NoSharding(),
        shuffle=True,
        num_epochs=1,
        seed=42,
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[Decode(), grain.transforms.Batch(batch_size=8, drop_remainder=True)],
        worker_count=0,
    )
    got = np.concatenate(list(loader)).tolist()
    assert sorted(got) == list(range(120))
    loader = grain.load(
        source=source,
        num_epochs=1,
        shuffle=True,
        seed=0,
        shard_options=grain.NoSharding(),
        transformations=[Decode()],
        batch_size=10,
        drop_remainder=True,
        worker_count=0,
    )
    assert sorted(np.concatenate(list(loader)).tolist()) == list(range(120))


# --- seed 004: TFDS sources in Dataset pipelines, Parquet hierarchical shuffle ------------------------


def test_seed004_tfds_checkpointing(data_dir):
    ds = (
        grain.MapDataset.source(tfds.data_source("seed_mnist", split="train", data_dir=data_dir))
        .seed(seed=45)
        .shuffle()
        .to_iter_dataset()
    )
    ds_iter = iter(ds)
    labels = [int(next(ds_iter)["label"]) for _ in range(4)]
    assert all(0 <= x < 10 for x in labels)
    testing.assert_equal_output_after_checkpoint(ds.map(lambda f: f["label"]), max_elements=40)


def test_seed004_mix_tfds_sources(data_dir):
    source1 = tfds.data_source(name="seed_pneumonia_mnist", split="train", data_dir=data_dir)
    source2 = tfds.data_source(name="seed_mnist", split="train", data_dir=data_dir)
    ds1 = grain.MapDataset.source(source1).map(lambda features: features["image"])
    ds2 = grain.MapDataset.source(source2).map(lambda features: features["image"])
    ds = grain.MapDataset.mix([ds1, ds2], weights=[0.7, 0.3])
    assert np.shape(ds[0]) == (28, 28, 1) and len(ds) > 0

    ds1 = (
        grain.MapDataset.source(source1)
        .filter(lambda features: int(features["label"]) == 1)
        .to_iter_dataset()
    )
    ds2 = (
        grain.MapDataset.source(source2)
        .filter(lambda features: int(features["label"]) > 4)
        .to_iter_dataset()
    )
    mixed = grain.IterDataset.mix([ds1, ds2], weights=[0.7, 0.3]).map(
        lambda features: features["image"]
    )
    assert np.shape(next(iter(mixed))) == (28, 28, 1)

    ds1 = grain.MapDataset.source(source1).seed(42).shuffle().repeat()
    ds2 = grain.MapDataset.source(source2).seed(43).shuffle().repeat()
    ds = grain.MapDataset.mix([ds1, ds2], weights=[1, 2])
    assert len(ds1) == len(ds2) == len(ds) == sys.maxsize
    testing.assert_equal_output_after_checkpoint(ds.map(lambda f: f["label"]), max_elements=60)


def test_seed004_tfds_plugin_source_in_workers(data_dir):
    src = grain.TfdsDataSource("seed_mnist", split="train[:50%]", data_dir=data_dir)
    ds = grain.MapDataset.source(src).seed(7).shuffle().map(lambda f: int(f["label"]))
    want = list(ds)
    it = iter(ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        assert list(it) == want
    finally:
        it.close()


def test_seed004_parquet_hierarchical_shuffle(parquet_files):
    interleave = _need(grain.experimental, "InterleaveIterDataset")
    window_shuffle = _need(grain.experimental, "WindowShuffleIterDataset")
    filenames = parquet_files
    dataset = grain.MapDataset.source(filenames).shuffle(seed=1)
    dataset = dataset.map(grain.experimental.ParquetIterDataset)
    dataset = window_shuffle(
        interleave(dataset, cycle_length=len(filenames)), window_size=10, seed=42
    )
    iter_ds = iter(dataset)
    first = [next(iter_ds) for _ in range(5)]
    assert all(set(r) == {"id", "text"} for r in first)
    ids = [int(r["id"]) for r in dataset]
    assert sorted(ids) == sorted(i for f in range(4) for i in range(f * 100, f * 100 + 30))
    testing.assert_equal_output_after_checkpoint(dataset)
