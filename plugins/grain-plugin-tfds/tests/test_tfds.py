"""Tests of TFDS random-access sources with grain_core (a locally built array_record dataset)."""

from __future__ import annotations

import importlib.util
import pickle
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tensorflow_datasets as tfds
from grain_plugin_tfds import TfdsDataSource

import grain_core as grain
from grain_core import testing

NUM_TRAIN, NUM_TEST = 60, 12  # as built by conftest.GrainTinyMnist

HAS_MP = importlib.util.find_spec("grain_core.runtime.multiprocess") is not None
NAME = "grain_tiny_mnist"


def _ids(records):
    return [int(r["id"]) for r in records]


def test_builds_without_tensorflow(tfds_data_dir):
    assert "tensorflow" not in sys.modules


def test_registered():
    assert grain.TfdsDataSource is TfdsDataSource
    assert grain.sources.TfdsDataSource is TfdsDataSource


def test_tfds_data_source_works_directly_with_map_dataset(tfds_data_dir):
    src = tfds.data_source(NAME, split="train[:50%]", data_dir=tfds_data_dir)
    assert len(src) == NUM_TRAIN // 2
    ds = grain.MapDataset.source(src).seed(45).shuffle()
    ids = _ids(ds.to_iter_dataset(grain.ReadOptions(num_threads=4)))
    assert len(ids) == NUM_TRAIN // 2 and len(set(ids)) == NUM_TRAIN // 2
    x = ds[0]
    assert x["image"].shape == (28, 28, 1) and x["image"].dtype == np.uint8
    assert int(x["label"]) == int(x["id"]) % 10
    # TFDS's own source raises ValueError (not IndexError) past its end, so the conformance kit's
    # check_source is run on TfdsDataSource (which fixes that) below; pipelines work as they are.
    testing.assert_equal_output_after_checkpoint(ds.map(lambda r: r["label"]).batch(4))


def test_tfds_data_source_in_threads(tfds_data_dir):
    src = tfds.data_source(NAME, split="train", data_dir=tfds_data_dir)
    want = [src[i]["id"] for i in range(len(src))]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: src[i]["id"], range(len(src))))
    assert got == want


def test_plugin_source_split_slicing_and_bulk_reads(tfds_data_dir):
    half = TfdsDataSource(NAME, split="train[:50%]", data_dir=tfds_data_dir)
    full = TfdsDataSource(NAME, split="train", data_dir=tfds_data_dir)
    test = TfdsDataSource(NAME, split="test", data_dir=tfds_data_dir)
    assert (len(half), len(full), len(test)) == (NUM_TRAIN // 2, NUM_TRAIN, NUM_TEST)
    assert _ids(half[i] for i in range(len(half))) == _ids(full[i] for i in range(len(half)))
    idx = [5, 0, 29, 5, -1]
    assert _ids(half.__getitems__(idx)) == [int(half[i]["id"]) for i in idx]
    with pytest.raises(IndexError, match="length 30"):
        half[30]
    with pytest.raises(IndexError, match="length 30"):
        half.__getitems__([0, 30])


def test_plugin_source_decoders(tfds_data_dir):
    raw = TfdsDataSource(
        NAME,
        split="test",
        data_dir=tfds_data_dir,
        decoders={"image": tfds.decode.SkipDecoding()},
    )
    rec = raw[0]  # Tensor features are stored raw: SkipDecoding leaves them as they are
    assert np.asarray(rec["image"]).size == 28 * 28 and int(rec["id"]) >= 0
    assert "decoders={'image': SkipDecoding}" in repr(raw)


def test_plugin_source_pickles_and_conforms(tfds_data_dir):
    src = TfdsDataSource(NAME, split="train[:50%]", data_dir=tfds_data_dir)
    src[0]
    clone = pickle.loads(pickle.dumps(src))
    assert clone._source is None and repr(clone) == repr(src)
    assert _ids(clone.__getitems__([1, 2])) == _ids(src.__getitems__([1, 2]))
    testing.check_source(src, mp_workers=2 if HAS_MP else 0)
    with src:
        src[1]
    assert src._source is None
    ds = grain.MapDataset.source(src).shuffle(seed=3).map(lambda r: r["image"]).batch(8)
    testing.assert_equal_output_after_checkpoint(ds)


@pytest.mark.skipif(
    not HAS_MP, reason="grain_core.runtime.multiprocess (mp_prefetch) not available"
)
def test_mp_prefetch_workers(tfds_data_dir):
    for src in (
        tfds.data_source(NAME, split="train[:50%]", data_dir=tfds_data_dir),
        TfdsDataSource(NAME, split="train[:50%]", data_dir=tfds_data_dir),
    ):
        ds = grain.MapDataset.source(src).seed(1).shuffle().map(lambda r: int(r["id"]))
        want = list(ds)
        it = iter(ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
        try:
            assert list(it) == want
        finally:
            it.close()


def test_bad_inputs(tfds_data_dir):
    with pytest.raises(Exception, match="no_such_dataset"):
        TfdsDataSource("no_such_dataset", split="train", data_dir=tfds_data_dir, download=False)
    with pytest.raises(Exception, match="nope"):
        TfdsDataSource(NAME, split="nope", data_dir=tfds_data_dir)
    with pytest.raises(TypeError):
        TfdsDataSource(None)
    with pytest.raises(TypeError, match="split must be"):
        TfdsDataSource(NAME, split=None, data_dir=tfds_data_dir)
    with pytest.raises(TypeError, match="data_dir must be"):
        TfdsDataSource(NAME, split="train", data_dir=3)
    src = TfdsDataSource(NAME, split="test", data_dir=tfds_data_dir)
    with pytest.raises(TypeError, match="integers"):
        src.__getitems__([1.5])  # must not be truncated to record 1
    with pytest.raises(TypeError, match="1-D"):
        src.__getitems__([[0, 1]])
    with pytest.raises(IndexError, match="length 12"):
        src.__getitems__([2**70])
    with pytest.raises(IndexError, match="length 12"):
        src[-13]
    assert src.__getitems__([]) == []


# --- hardening -------------------------------------------------------------------------------------


class _BulkSpy:
    """Wraps the real TFDS source and records which of its read paths are used."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        self.calls.append(("getitem", i))
        return self.inner[i]

    def __getitems__(self, keys):
        self.calls.append(("getitems", list(keys)))
        return self.inner.__getitems__(keys)


def test_bulk_reads_use_tfds_getitems(tfds_data_dir):
    src = TfdsDataSource(NAME, split="train", data_dir=tfds_data_dir)
    assert hasattr(src.tfds_source, "__getitems__")  # TFDS's array_record sources have one
    ids = [int(src[i]["id"]) for i in range(NUM_TRAIN)]  # TFDS shuffles examples when preparing
    spy = _BulkSpy(src.tfds_source)
    src._source = spy
    got = src.__getitems__([7, -1, 3])
    assert spy.calls == [("getitems", [7, NUM_TRAIN - 1, 3])]
    assert _ids(got) == [ids[7], ids[-1], ids[3]]
    spy.calls.clear()
    batch = grain.MapDataset.source(src).map(lambda r: int(r["id"])).batch(5)[1]
    assert batch.tolist() == ids[5:10]
    assert spy.calls == [("getitems", [5, 6, 7, 8, 9])]  # the kernel's batch reads in bulk


def _open_fds(name_part: str) -> int:
    n = testing.open_file_count(name_part)
    if n is None:
        pytest.skip("needs /proc/self/fd")
    return n



def test_close_releases_files_and_waits_for_reads(tfds_data_dir):
    before = _open_fds(".array_record")
    src = TfdsDataSource(NAME, split="train", data_dir=tfds_data_dir)
    ids = [int(r["id"]) for r in src.__getitems__(list(range(NUM_TRAIN)))]
    assert _open_fds(".array_record") > before
    src.close()
    assert _open_fds(".array_record") == before
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, NUM_TRAIN, size=10).tolist() for _ in range(100)]
    with ThreadPoolExecutor(8) as pool:
        futs = [pool.submit(src.__getitems__, b) for b in batches]
        for _ in range(10):
            src.close()  # must neither break a read in flight nor stop later reads
        for b, f in zip(batches, futs):
            assert _ids(f.result()) == [ids[i] for i in b]
    src.close()
    assert _open_fds(".array_record") == before


def test_repr_is_stable_across_processes_and_names_what_changes_the_data(tfds_data_dir):
    import subprocess

    src = TfdsDataSource(NAME, split="train[:50%]", data_dir=tfds_data_dir)
    code = (
        "import grain_core as g; "
        f"print(repr(g.TfdsDataSource({NAME!r}, split='train[:50%]', data_dir={tfds_data_dir!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == repr(src)
    skip = TfdsDataSource(
        NAME,
        split="train[:50%]",
        data_dir=tfds_data_dir,
        decoders={"image": tfds.decode.SkipDecoding()},
        builder_kwargs={"version": "1.0.0"},
    )
    assert "0x" not in repr(skip)  # no memory addresses
    assert "SkipDecoding" in repr(skip) and "builder_kwargs={'version': '1.0.0'}" in repr(skip)
    assert repr(skip) != repr(src)
    assert pickle.loads(pickle.dumps(skip)).__repr__() == repr(skip)


def test_cli_lists_the_plugin_with_its_version():
    testing.check_plugin_listed("tfds", "grain-plugin-tfds", ["TfdsDataSource"])
