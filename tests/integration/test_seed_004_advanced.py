"""Every example of seed 004 (the advanced ``Dataset`` tutorial), run as written with
``import grain_core as grain``.

Stand-ins (nothing is downloaded, no TensorFlow):

* ``mnist`` / ``pneumonia_mnist``: two small TFDS datasets built locally with a
  ``GeneratorBasedBuilder`` in array_record format (Tensor features, no Image), read with
  ``tfds.data_source(name=..., split="train", data_dir=...)``. TFDS already registers builders named
  ``mnist`` and ``pneumonia_mnist``, so ours are ``seed004_mnist`` / ``seed004_pneumonia_mnist``;
  ``data_dir`` is the only other change to the examples.
* ``filenames`` of the hierarchical-shuffle example: Parquet files written with pyarrow.

Images encode where they come from, so mixed / shuffled outputs can be traced back: every pixel is
the source's tag except ``image[0, 0]`` / ``image[0, 1]``, which hold the example id (hi / lo byte).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pprint import pprint

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import grain_core as grain
from grain_core import testing

tfds = pytest.importorskip("tensorflow_datasets")
pytest.importorskip("array_record")

pytestmark = pytest.mark.timeout(240)

MNIST = "seed004_mnist"
PNEUMONIA_MNIST = "seed004_pneumonia_mnist"
N_MNIST, N_PNEUMONIA = 300, 200
MNIST_TAG, PNEUMONIA_TAG = 100, 200
_SUBPROCESS_ENV = "GRAIN_CORE_SEED004_SUBPROCESS"


# --- local stand-ins --------------------------------------------------------------------------------


def _image(tag: int, i: int) -> np.ndarray:
    image = np.full((28, 28, 1), tag, np.uint8)
    image[0, 0, 0], image[0, 1, 0] = divmod(i, 256)
    return image


def _origin(image) -> tuple[int, int]:
    """(source tag, example id) of an image made by :func:`_image`."""
    image = np.asarray(image)
    return int(image[27, 27, 0]), int(image[0, 0, 0]) * 256 + int(image[0, 1, 0])


def _mnist_label(i: int) -> int:
    return i % 10


def _pneumonia_label(i: int) -> int:
    return i % 2


class Seed004Mnist(tfds.core.GeneratorBasedBuilder):
    """MNIST stand-in: 28x28x1 uint8 images, 10 classes (label = id % 10)."""

    VERSION = tfds.core.Version("3.0.1")
    SIZE, TAG, NUM_CLASSES = N_MNIST, MNIST_TAG, 10

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(shape=(28, 28, 1), dtype=np.uint8),
                    "label": tfds.features.ClassLabel(num_classes=self.NUM_CLASSES),
                }
            ),
            disable_shuffling=True,  # record i is example i
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(self.SIZE), "test": self._generate_examples(20)}

    def _generate_examples(self, n):
        for i in range(n):
            yield i, {"image": _image(self.TAG, i), "label": i % self.NUM_CLASSES}


class Seed004PneumoniaMnist(Seed004Mnist):
    """PneumoniaMNIST stand-in: 2 classes (label = id % 2)."""

    VERSION = tfds.core.Version("1.0.0")
    SIZE, TAG, NUM_CLASSES = N_PNEUMONIA, PNEUMONIA_TAG, 2


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> str:
    d = str(tmp_path_factory.mktemp("seed004_tfds"))
    for cls in (Seed004Mnist, Seed004PneumoniaMnist):
        cls(data_dir=d, file_format="array_record").download_and_prepare(
            download_config=tfds.download.DownloadConfig(try_download_gcs=False)
        )
    return d


@pytest.fixture(scope="module")
def filenames(tmp_path_factory) -> list[str]:
    """4 Parquet shards of 25 rows (ids f*100 .. f*100+24), 3 row groups each."""
    d = tmp_path_factory.mktemp("seed004_parquet")
    paths = []
    for f in range(4):
        ids = np.arange(f * 100, f * 100 + 25, dtype=np.int64)
        path = str(d / f"part-{f:05d}.parquet")
        pq.write_table(
            pa.table({"id": ids, "text": [f"row {i}" for i in ids]}), path, row_group_size=10
        )
        paths.append(path)
    return paths


def _key(features) -> tuple[int, int, int]:
    """(source tag, id, label) of a TFDS example, checking the label matches the id."""
    tag, i = _origin(features["image"])
    label = int(np.asarray(features["label"]))
    want = _mnist_label(i) if tag == MNIST_TAG else _pneumonia_label(i)
    assert label == want, (tag, i, label)
    return tag, i, label


def _mnist(data_dir):
    return tfds.data_source(name=MNIST, split="train", data_dir=data_dir)


def _in_order(n: int) -> list[tuple[int, int, int]]:
    """What an unshuffled mnist pipeline yields first: the source's records in index order."""
    return [(MNIST_TAG, i, _mnist_label(i)) for i in range(n)]


def test_stand_ins(data_dir):
    source = _mnist(data_dir)
    assert len(source) == N_MNIST
    assert [_key(source[i]) for i in (0, 1, 257)] == [
        (MNIST_TAG, 0, 0),
        (MNIST_TAG, 1, 1),
        (MNIST_TAG, 257, 7),
    ]
    assert source[3]["image"].dtype == np.uint8 and source[3]["image"].shape == (28, 28, 1)
    pneumonia = tfds.data_source(name=PNEUMONIA_MNIST, split="train", data_dir=data_dir)
    assert len(pneumonia) == N_PNEUMONIA
    assert _key(pneumonia[5]) == (PNEUMONIA_TAG, 5, 1)


# --- Checkpointing ----------------------------------------------------------------------------------


def test_checkpointing_with_orbax(data_dir, tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    ds = (
        grain.MapDataset.source(tfds.data_source(MNIST, split="train", data_dir=data_dir))
        .seed(seed=45)
        .shuffle()
        .to_iter_dataset()
    )
    # The uninterrupted order: the shuffled MapDataset read by index.
    shuffled = grain.MapDataset.source(_mnist(data_dir)).seed(seed=45).shuffle()
    want = [_key(shuffled[i]) for i in range(8)]
    assert sorted(_key(x)[1] for x in shuffled) == list(range(N_MNIST))
    assert [k[1] for k in want] != list(range(8))

    num_steps = 4
    ds_iter = iter(ds)
    first = []
    for i in range(num_steps):
        x = next(ds_iter)
        print(i, x["label"])
        first.append(_key(x))
    assert first == want[:4]

    directory = str(tmp_path / "orbax")
    mngr = ocp.CheckpointManager(directory)
    try:
        # Save the checkpoint.
        assert mngr.save(step=num_steps, args=grain.checkpoint.CheckpointSave(ds_iter), force=True)
        mngr.wait_until_finished()
        # `!cat /tmp/orbax/*/*/*.json`: the iterator state as JSON under the step directory.
        files = glob.glob(os.path.join(directory, "*", "*", "*.json"))
        assert len(files) == 1 and os.sep + str(num_steps) + os.sep in files[0]
        with open(files[0]) as f:
            assert json.load(f)
        assert mngr.all_steps() == [num_steps]

        # Read more elements and advance the iterator.
        advanced = []
        for i in range(4, 8):
            x = next(ds_iter)
            print(i, x["label"])
            advanced.append(_key(x))
        assert advanced == want[4:]

        # Restore iterator from the previously saved checkpoint.
        mngr.restore(num_steps, args=grain.checkpoint.CheckpointRestore(ds_iter))
        # Iterator should be set back to start from 4.
        again = []
        for i in range(4, 8):
            x = next(ds_iter)
            print(i, x["label"])
            again.append(_key(x))
        assert again == advanced

        # A fresh iterator restored from the same checkpoint continues the same way.
        fresh = iter(ds)
        mngr.restore(num_steps, args=grain.checkpoint.CheckpointRestore(fresh))
        assert [_key(next(fresh)) for _ in range(4)] == want[4:]
    finally:
        mngr.close()


# --- Mixing datasets --------------------------------------------------------------------------------


def test_map_dataset_mix(data_dir, monkeypatch, capsys):
    # As in the example (restored after the test instead of leaking into other tests).
    monkeypatch.setattr(
        tfds.core.DatasetInfo, "file_format", tfds.core.file_adapters.FileFormat.ARRAY_RECORD
    )
    source1 = tfds.data_source(name=PNEUMONIA_MNIST, split="train", data_dir=data_dir)
    source2 = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
    ds1 = grain.MapDataset.source(source1).map(lambda features: features["image"])
    ds2 = grain.MapDataset.source(source2).map(lambda features: features["image"])
    ds = grain.MapDataset.mix([ds1, ds2], weights=[0.7, 0.3])
    print(f"Mixed dataset length = {len(ds)}")
    pprint(np.shape(ds[0]))
    assert "(28, 28, 1)" in capsys.readouterr().out
    assert np.shape(ds[0]) == (28, 28, 1)

    # One epoch ends when the shortest component's share runs out: 200 / 0.7 elements.
    assert abs(len(ds) - N_PNEUMONIA / 0.7) <= 1
    origins = [_origin(image) for image in ds]
    assert len(origins) == len(ds)
    pneumonia = [i for tag, i in origins if tag == PNEUMONIA_TAG]
    mnist = [i for tag, i in origins if tag == MNIST_TAG]
    assert len(pneumonia) + len(mnist) == len(ds)
    assert abs(len(pneumonia) / len(ds) - 0.7) <= 0.01
    # Within an epoch no record of a component is repeated; the short one is (nearly) used up.
    assert len(set(pneumonia)) == len(pneumonia) >= N_PNEUMONIA - 1
    assert len(set(mnist)) == len(mnist) <= N_MNIST
    # The weights hold on any stretch, not just on the whole epoch.
    head = [tag for tag, _ in origins[:100]]
    assert abs(head.count(PNEUMONIA_TAG) - 70) <= 2
    assert ds[5].dtype == np.uint8


def test_iter_dataset_mix_with_filters(data_dir, capsys):
    source1 = tfds.data_source(name=PNEUMONIA_MNIST, split="train", data_dir=data_dir)
    source2 = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
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

    ds = grain.IterDataset.mix([ds1, ds2], weights=[0.7, 0.3]).map(
        lambda features: features["image"]
    )
    pprint(np.shape(next(iter(ds))))
    assert capsys.readouterr().out.strip() == "(28, 28, 1)"

    origins = [_origin(image) for image in ds]
    pneumonia = [i for tag, i in origins if tag == PNEUMONIA_TAG]
    mnist = [i for tag, i in origins if tag == MNIST_TAG]
    assert len(pneumonia) + len(mnist) == len(origins)
    # Every element passed its component's filter.
    assert all(_pneumonia_label(i) == 1 for i in pneumonia)
    assert all(_mnist_label(i) > 4 for i in mnist)
    # Components are read in order; the mixture stops when the 100 pneumonia "1"s run out.
    assert (
        pneumonia == [i for i in range(N_PNEUMONIA) if _pneumonia_label(i) == 1][: len(pneumonia)]
    )
    assert mnist == [i for i in range(N_MNIST) if _mnist_label(i) > 4][: len(mnist)]
    assert len(pneumonia) >= N_PNEUMONIA // 2 - 1
    assert abs(len(pneumonia) / len(origins) - 0.7) <= 0.02
    testing.assert_equal_output_after_checkpoint(ds.map(_origin), max_elements=60)


def test_multi_epoch_mix_with_repeat(data_dir, capsys):
    source1 = tfds.data_source(name=PNEUMONIA_MNIST, split="train", data_dir=data_dir)
    source2 = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
    ds1 = grain.MapDataset.source(source1).repeat()
    ds2 = grain.MapDataset.source(source2).repeat()

    ds = grain.MapDataset.mix([ds1, ds2], weights=[1, 2])
    print(f"Mixed dataset length = {len(ds1)}")  # sys.maxsize
    print(f"Mixed dataset length = {len(ds2)}")  # sys.maxsize
    print(f"Mixed dataset length = {len(ds)}")  # sys.maxsize
    assert capsys.readouterr().out.splitlines() == [f"Mixed dataset length = {sys.maxsize}"] * 3
    assert len(ds1) == len(ds2) == len(ds) == sys.maxsize

    # Past the first epoch of either component, the mixture keeps going: components repeat.
    n = 3 * N_MNIST  # 1.5 epochs of pneumonia, 2 of mnist
    origins = [_origin(x["image"]) for x in ds[:n]]
    pneumonia = [i for tag, i in origins if tag == PNEUMONIA_TAG]
    mnist = [i for tag, i in origins if tag == MNIST_TAG]
    assert abs(len(pneumonia) - n // 3) <= 2 and len(pneumonia) + len(mnist) == n
    assert pneumonia == [k % N_PNEUMONIA for k in range(len(pneumonia))]
    assert mnist == [k % N_MNIST for k in range(len(mnist))]


def test_global_shuffle_then_mix(data_dir, capsys):
    source1 = tfds.data_source(name=PNEUMONIA_MNIST, split="train", data_dir=data_dir)
    source2 = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
    ds1 = grain.MapDataset.source(source1).seed(42).shuffle().repeat()
    ds2 = grain.MapDataset.source(source2).seed(43).shuffle().repeat()

    ds = grain.MapDataset.mix([ds1, ds2], weights=[1, 2])
    print(f"Mixed dataset length = {len(ds)}")  # sys.maxsize
    assert capsys.readouterr().out.strip() == f"Mixed dataset length = {sys.maxsize}"
    assert len(ds) == sys.maxsize

    n = 3 * 2 * N_PNEUMONIA  # two epochs of pneumonia, 800 mnist records
    origins = [_origin(x["image"]) for x in ds[:n]]
    pneumonia = [i for tag, i in origins if tag == PNEUMONIA_TAG]
    mnist = [i for tag, i in origins if tag == MNIST_TAG]
    assert abs(len(pneumonia) - n // 3) <= 2
    # Each epoch of each component is a permutation of its records: global shuffle.
    epoch0, epoch1 = pneumonia[:N_PNEUMONIA], pneumonia[N_PNEUMONIA : 2 * N_PNEUMONIA]
    assert sorted(epoch0) == list(range(N_PNEUMONIA))
    assert epoch0 != list(range(N_PNEUMONIA))
    assert sorted(mnist[:N_MNIST]) == sorted(mnist[N_MNIST : 2 * N_MNIST]) == list(range(N_MNIST))
    assert mnist[:N_MNIST] != list(range(N_MNIST))
    # Different epochs are shuffled differently.
    assert len(epoch1) == N_PNEUMONIA and sorted(epoch1) == sorted(epoch0) and epoch1 != epoch0
    assert mnist[:N_MNIST] != mnist[N_MNIST : 2 * N_MNIST]
    # Each component keeps the order of its own shuffled dataset (shuffle before mixing).
    assert pneumonia[:50] == [_origin(ds1[k]["image"])[1] for k in range(50)]
    assert mnist[:50] == [_origin(ds2[k]["image"])[1] for k in range(50)]
    # Deterministic: the same seeds give the same data; another seed gives another order.
    again = grain.MapDataset.mix(
        [
            grain.MapDataset.source(source1).seed(42).shuffle().repeat(),
            grain.MapDataset.source(source2).seed(43).shuffle().repeat(),
        ],
        weights=[1, 2],
    )
    assert [_origin(x["image"]) for x in again[:60]] == origins[:60]
    other = grain.MapDataset.source(source1).seed(44).shuffle()
    assert [_origin(x["image"])[1] for x in other] != epoch0
    testing.assert_equal_output_after_checkpoint(
        ds.map(lambda x: _origin(x["image"])), max_elements=40
    )


# --- Hierarchical shuffle ---------------------------------------------------------------------------


def _row(row) -> tuple[int, str]:
    text = row["text"]
    return int(row["id"]), text.decode() if isinstance(text, bytes) else str(text)


def _hierarchical(filenames, seed=42):
    dataset = grain.MapDataset.source(filenames)
    dataset = dataset.map(grain.experimental.ParquetIterDataset)
    dataset = grain.experimental.WindowShuffleIterDataset(
        grain.experimental.InterleaveIterDataset(dataset, cycle_length=len(filenames)),
        window_size=10,
        seed=seed,
    )
    return dataset


def test_hierarchical_shuffle(filenames, capsys):
    dataset = grain.MapDataset.source(filenames)
    dataset = dataset.map(grain.experimental.ParquetIterDataset)
    dataset = grain.experimental.WindowShuffleIterDataset(
        grain.experimental.InterleaveIterDataset(dataset, cycle_length=len(filenames)),
        window_size=10,
        seed=42,
    )
    iter_ds = iter(dataset)
    first = []
    for _ in range(5):
        row = next(iter_ds)
        print(row)
        first.append(row)
    assert len(capsys.readouterr().out.splitlines()) == 5
    assert all(set(row) == {"id", "text"} for row in first)

    file_order = [(int(i), f"row {i}") for f in range(4) for i in range(f * 100, f * 100 + 25)]
    rows = [_row(r) for r in dataset]
    assert [_row(r) for r in first] == rows[:5]
    # Every row exactly once, in an order that is not the files' order.
    assert len(rows) == len(file_order) and sorted(rows) == file_order
    assert rows != file_order
    # The interleave alone (no window shuffle) reads all 4 files at once; the window shuffle
    # reorders that stream, but only within reach of its 10-element buffer.
    interleaved = [
        _row(r)
        for r in grain.experimental.InterleaveIterDataset(
            grain.MapDataset.source(filenames).map(grain.experimental.ParquetIterDataset),
            cycle_length=len(filenames),
        )
    ]
    assert sorted(interleaved) == file_order
    assert {i // 100 for i, _ in interleaved[:8]} == {0, 1, 2, 3}
    assert rows != interleaved
    position = {r: k for k, r in enumerate(interleaved)}
    assert all(k >= position[r] - 9 for k, r in enumerate(rows))
    # Deterministic for a seed, different for another.
    assert [_row(r) for r in _hierarchical(filenames)] == rows
    assert [_row(r) for r in _hierarchical(filenames, seed=43)] != rows

    # Restoring a checkpoint taken mid-way continues exactly.
    it = iter(dataset)
    head = [_row(next(it)) for _ in range(37)]
    state = json.loads(json.dumps(it.get_state()))
    tail = [_row(r) for r in it]
    assert head + tail == rows
    restored = iter(dataset)
    restored.set_state(state)
    assert [_row(r) for r in restored] == tail
    testing.assert_equal_output_after_checkpoint(dataset)


# --- Prefetching ------------------------------------------------------------------------------------


def test_thread_prefetch_then_device_put(data_dir):
    import jax

    cpu_buffer_size = 3
    source = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
    ds = grain.MapDataset.source(source).to_iter_dataset()
    ds.map(lambda x: x)  # Dummy map to illustrate the usage.
    ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=cpu_buffer_size)
    ds = ds.map(jax.device_put)

    it = iter(ds)
    try:
        got = [next(it) for _ in range(10)]
        assert all(isinstance(x["image"], jax.Array) for x in got)
        assert all(isinstance(x["label"], jax.Array) for x in got)
        assert [_key(x) for x in got] == _in_order(10)
        state = json.loads(json.dumps(it.get_state()))
        rest = [_key(x) for x in it]
        assert rest == _in_order(N_MNIST)[10:]
    finally:
        it.close()
    with iter(ds) as restored:
        restored.set_state(state)
        assert [_key(next(restored)) for _ in range(5)] == _in_order(15)[10:]


def _rerun_in_subprocess_with_4_devices(test_name: str) -> None:
    """Runs ``test_name`` of this file in a fresh interpreter with 4 fake CPU devices."""
    if os.environ.get(_SUBPROCESS_ENV):
        pytest.fail("the subprocess still does not see 4 JAX devices")
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env[_SUBPROCESS_ENV] = "1"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{__file__}::{test_name}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert proc.returncode == 0 and "1 passed" in proc.stdout, (
        proc.stdout[-4000:] + proc.stderr[-4000:]
    )


def test_device_put_named_sharding(data_dir):
    import jax

    if jax.device_count() != 4:  # a JAX backend was set up before conftest.py set XLA_FLAGS
        _rerun_in_subprocess_with_4_devices("test_device_put_named_sharding")
        return

    cpu_buffer_size = 3
    tpu_buffer_size = 2
    source = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
    ds = grain.MapDataset.source(source).to_iter_dataset()
    ds.map(lambda x: x)  # Dummy map to illustrate the usage.

    devices = jax.devices()

    mesh = jax.sharding.Mesh(np.array(devices), axis_names=("data",))
    p = jax.sharding.PartitionSpec("data")
    sharding = jax.sharding.NamedSharding(mesh, p)

    example_ds = grain.experimental.device_put(
        ds=ds,
        device=sharding,
        cpu_buffer_size=cpu_buffer_size,
        device_buffer_size=tpu_buffer_size,
    )
    assert isinstance(example_ds, grain.IterDataset)

    # Sharding the leading "data" axis over 4 devices needs arrays with a batch axis (a single
    # example's scalar label has none), so read the same call over batches of 8.
    batched = grain.experimental.device_put(
        ds=ds.batch(8),
        device=sharding,
        cpu_buffer_size=cpu_buffer_size,
        device_buffer_size=tpu_buffer_size,
    )
    it = iter(batched)
    try:
        batches = [next(it) for _ in range(3)]
        state = json.loads(json.dumps(it.get_state()))
        following = next(it)
    finally:
        it.close()
    for b, batch in enumerate(batches + [following]):
        image, label = batch["image"], batch["label"]
        assert isinstance(image, jax.Array) and image.shape == (8, 28, 28, 1)
        assert image.sharding == sharding and label.sharding == sharding
        assert len(image.addressable_shards) == 4
        assert {s.data.shape for s in image.addressable_shards} == {(2, 28, 28, 1)}
        assert {d for s in image.addressable_shards for d in s.data.devices()} == set(devices)
        ids = [_origin(x)[1] for x in np.asarray(image)]
        assert ids == list(range(8 * b, 8 * b + 8))
        assert np.asarray(label).tolist() == [_mnist_label(i) for i in ids]
    with iter(batched) as restored:
        restored.set_state(state)
        again = next(restored)
        np.testing.assert_array_equal(np.asarray(again["image"]), np.asarray(following["image"]))


def test_multithread_prefetch_read_options(data_dir):
    # If not set defaults to 16 threads and buffer 500.
    default = grain.ReadOptions()
    assert (default.num_threads, default.prefetch_buffer_size) == (16, 500)
    read_options = grain.ReadOptions(num_threads=32, prefetch_buffer_size=400)

    source = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
    ds = grain.MapDataset.source(source).to_iter_dataset(read_options=read_options)

    assert [_key(x) for x in ds] == _in_order(N_MNIST)
    testing.assert_equal_output_after_checkpoint(
        ds.map(lambda x: _origin(x["image"])), checkpoints=[0, 1, 77, 250, N_MNIST]
    )


def test_multithread_prefetch_autotune(data_dir):
    source = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
    ds = grain.MapDataset.source(source)
    performance_config = grain.experimental.pick_performance_config(
        ds=ds, ram_budget_mb=1024, max_workers=None, max_buffer_size=None
    )
    ds = ds.to_iter_dataset(read_options=performance_config.read_options)

    read_options = performance_config.read_options
    assert isinstance(read_options, grain.ReadOptions)
    assert read_options.prefetch_buffer_size >= 1 and read_options.num_threads >= 1
    element_bytes = 28 * 28 + 8  # an image and an int64 label, at least
    assert read_options.prefetch_buffer_size * element_bytes <= 1024 * 2**20
    assert [_key(x) for x in ds] == _in_order(N_MNIST)


def test_multiprocess_prefetch(data_dir):
    source = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
    ds = grain.MapDataset.source(source).to_iter_dataset()

    prefetch_lazy_iter_ds = ds.mp_prefetch(
        grain.MultiprocessingOptions(num_workers=3, per_worker_buffer_size=10),
    )
    assert isinstance(prefetch_lazy_iter_ds, grain.IterDataset)

    in_process = [_key(x) for x in ds]
    assert in_process == _in_order(N_MNIST)
    it = iter(prefetch_lazy_iter_ds)
    try:
        got = [_key(next(it)) for _ in range(40)]
        assert got == in_process[:40]
        state = json.loads(json.dumps(it.get_state()))
        assert _key(next(it)) == in_process[40]
    finally:
        it.close()
    # The saved state resumes in a new iterator (new workers) at element 40.
    with iter(prefetch_lazy_iter_ds) as restored:
        restored.set_state(state)
        assert [_key(next(restored)) for _ in range(3)] == in_process[40:43]


def test_multiprocess_prefetch_autotune(data_dir):
    source = tfds.data_source(name=MNIST, split="train", data_dir=data_dir)
    ds = grain.MapDataset.source(source).to_iter_dataset()

    performance_config = grain.experimental.pick_performance_config(
        ds=ds, ram_budget_mb=1024, max_workers=None, max_buffer_size=None
    )

    prefetch_lazy_iter_ds = ds.mp_prefetch(
        performance_config.multiprocessing_options,
    )

    options = performance_config.multiprocessing_options
    assert isinstance(options, grain.MultiprocessingOptions)
    assert 0 <= options.num_workers <= (os.cpu_count() or 1)
    assert options.per_worker_buffer_size >= 1
    it = iter(prefetch_lazy_iter_ds)
    try:
        assert [_key(next(it)) for _ in range(25)] == _in_order(25)
    finally:
        it.close()
