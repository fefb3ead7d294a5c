"""Tests of ArrayRecordDataSource and FileInstruction, with real ArrayRecord files."""

from __future__ import annotations

import importlib.util
import pathlib
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter
from grain_plugin_arrayrecord import ArrayRecordDataSource, FileInstruction

import grain_core as grain
from grain_core import testing

HAS_MP = importlib.util.find_spec("grain_core.runtime.multiprocess") is not None
SIZES = (10, 20, 5)


def _record(f: int, i: int) -> bytes:
    return b"file%d-record%03d" % (f, i) + b"\x00" * (i % 3)  # trailing NULs must survive


def write_file(path, records) -> str:
    w = ArrayRecordWriter(str(path), "group_size:1")
    for r in records:
        w.write(r)
    w.close()
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[str]:
    d = tmp_path_factory.mktemp("ar")
    return [
        write_file(d / f"data-{f:05d}-of-00003.array_record", [_record(f, i) for i in range(n)])
        for f, n in enumerate(SIZES)
    ]


@pytest.fixture(scope="module")
def expected() -> list[bytes]:
    return [_record(f, i) for f, n in enumerate(SIZES) for i in range(n)]


def test_registered_under_grain_names():
    assert grain.ArrayRecordDataSource is ArrayRecordDataSource
    assert grain.sources.ArrayRecordDataSource is ArrayRecordDataSource
    assert grain.sources.FileInstruction is FileInstruction
    assert grain.FileInstruction is FileInstruction


def test_single_path_list_glob_and_pathlike(files, expected):
    one = ArrayRecordDataSource(files[0])
    assert len(one) == SIZES[0]
    assert one[3] == _record(0, 3)
    many = ArrayRecordDataSource(files)
    assert len(many) == sum(SIZES)
    assert [many[i] for i in range(len(many))] == expected
    pattern = str(pathlib.Path(files[0]).parent / "data-*.array_record")
    globbed = ArrayRecordDataSource([pattern])
    assert globbed.paths == files
    assert list(globbed) == expected
    assert ArrayRecordDataSource(pathlib.Path(files[1]))[0] == _record(1, 0)


def test_getitems_grouped_per_file_in_the_order_asked(files, expected):
    src = ArrayRecordDataSource(files)
    idx = [34, 0, 12, 12, 9, 30, 1, -1, 25]
    assert src.__getitems__(idx) == [expected[i] for i in idx]
    assert src.__getitems__(np.array([5, 3], dtype=np.int32)) == [expected[5], expected[3]]
    assert src.__getitems__([]) == []
    assert src[-35] == expected[0]


def test_file_instructions_select_records_without_opening_files(files, expected, tmp_path):
    src = ArrayRecordDataSource(
        [
            FileInstruction(files[0], skip=2, take=3, examples_in_shard=10),
            FileInstruction(files[1], skip=15, take=-1, examples_in_shard=20),
        ]
    )
    assert len(src) == 3 + 5
    want = [_record(0, i) for i in (2, 3, 4)] + [_record(1, i) for i in range(15, 20)]
    assert [src[i] for i in range(len(src))] == want
    assert src.__getitems__([7, 0, 4]) == [want[7], want[0], want[4]]

    # A FileInstruction's counts are trusted: the file is only opened on a read.
    ghost = ArrayRecordDataSource(
        FileInstruction(str(tmp_path / "not-there.array_record"), 0, 7, 7)
    )
    assert len(ghost) == 7
    with pytest.raises(FileNotFoundError, match="not-there"):
        ghost[0]

    class TfdsLike:  # any object with the four fields works
        def __init__(self, filename, skip, take, examples_in_shard):
            self.filename, self.skip, self.take = filename, skip, take
            self.examples_in_shard = examples_in_shard

    duck = ArrayRecordDataSource([TfdsLike(files[2], 1, 2, 5)])
    assert [duck[0], duck[1]] == [_record(2, 1), _record(2, 2)]


def test_file_instruction_validation():
    with pytest.raises(ValueError, match=r"exceeds examples_in_shard \(10\)"):
        FileInstruction("x.array_record", skip=5, take=6, examples_in_shard=10)
    with pytest.raises(ValueError, match="non-negative"):
        FileInstruction("x.array_record", skip=-1, take=1, examples_in_shard=10)
    with pytest.raises(TypeError):
        FileInstruction("x.array_record", skip=1.5, take=1, examples_in_shard=10)


def test_bad_inputs_name_the_problem(files, tmp_path):
    missing = str(tmp_path / "missing.array_record")
    with pytest.raises(FileNotFoundError, match="missing.array_record"):
        ArrayRecordDataSource(missing)
    with pytest.raises(FileNotFoundError, match="no file matches"):
        ArrayRecordDataSource(str(tmp_path / "nothing-*.array_record"))
    bogus = tmp_path / "bogus.array_record"
    bogus.write_bytes(b"this is not an array record file" * 100)
    with pytest.raises(ValueError, match="bogus.array_record.*not a valid ArrayRecord"):
        len(ArrayRecordDataSource(str(bogus)))
    src = ArrayRecordDataSource(files)
    with pytest.raises(IndexError, match="length 35"):
        src[35]
    with pytest.raises(IndexError, match="length 35"):
        src.__getitems__([0, 35])
    with pytest.raises(IndexError, match="length 35"):
        src[-36]
    with pytest.raises(ValueError, match="reader_options"):
        len(ArrayRecordDataSource(files, reader_options={"no_such_option": 1}))
    with pytest.raises(TypeError):
        ArrayRecordDataSource(42)


def test_reader_options_are_passed_to_the_reader(files, expected):
    src = ArrayRecordDataSource(files, reader_options={"index_storage_option": "in_memory"})
    assert "index_storage_option:in_memory" in src._reader_options
    assert "readahead_buffer_size:0" in src._reader_options
    assert src.__getitems__([3, 20]) == [expected[3], expected[20]]
    src2 = ArrayRecordDataSource(files, reader_options="readahead_buffer_size:1M")
    assert "readahead_buffer_size:1M" in src2._reader_options
    assert src2[34] == expected[34]


def test_pickle_reopens_readers_and_repr_is_stable(files, expected):
    src = ArrayRecordDataSource(files)
    assert src[0] == expected[0]  # opens a reader; it must not be pickled
    clone = pickle.loads(pickle.dumps(src))
    assert all(r is None for r in clone._readers)
    assert clone.__getitems__([34, 0]) == [expected[34], expected[0]]
    assert repr(clone) == repr(src)
    assert "num_files=3" in repr(src) and files[0] in repr(src) and "len=35" in repr(src)
    code = f"import grain_core as g; print(repr(g.ArrayRecordDataSource({files!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == repr(src)


def test_context_manager_closes_readers(files, expected):
    with ArrayRecordDataSource(files) as src:
        assert src.__getitems__([0, 11, 31]) == [expected[0], expected[11], expected[31]]
        assert any(r is not None for r in src._readers)
    assert all(r is None for r in src._readers)
    assert src[1] == expected[1]  # reopened lazily
    src.close()


def test_thread_safe(files, expected):
    src = ArrayRecordDataSource(files)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(src), size=50).tolist() for _ in range(64)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(src.__getitems__, batches))
        singles = list(pool.map(src.__getitem__, range(len(src))))
    for b, r in zip(batches, results):
        assert r == [expected[i] for i in b]
    assert singles == expected


def test_conformance_kit(files):
    testing.check_source(ArrayRecordDataSource(files), mp_workers=2 if HAS_MP else 0)
    testing.check_source(ArrayRecordDataSource([FileInstruction(files[1], 3, 10, 20)]))


@pytest.mark.skipif(
    not HAS_MP, reason="grain_core.runtime.multiprocess (mp_prefetch) not available"
)
def test_mp_prefetch_reads_in_workers(files, expected):
    ds = grain.MapDataset.source(ArrayRecordDataSource(files)).to_iter_dataset()
    it = iter(ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        assert list(it) == expected
    finally:
        it.close()


def test_pipeline_checkpoints(files):
    src = ArrayRecordDataSource(files)
    ds = grain.MapDataset.source(src).shuffle(seed=0).map(len).batch(4)
    testing.assert_equal_output_after_checkpoint(ds)
    threaded = (
        grain.MapDataset.source(src)
        .seed(3)
        .shuffle()
        .to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=8))
    )
    testing.assert_equal_output_after_checkpoint(threaded)


def test_reads_run_in_parallel_and_close_waits_for_them(files, expected):
    # Reads share one reader per file without a lock; close() while threads read must neither
    # break a read in flight nor stop later reads (which reopen the reader).
    src = ArrayRecordDataSource(files)
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, len(src), size=40).tolist() for _ in range(200)]

    def read(b):
        return src.__getitems__(b)

    with ThreadPoolExecutor(8) as pool:
        futs = [pool.submit(read, b) for b in batches]
        for _ in range(20):
            src.close()
        results = [f.result() for f in futs]
    for b, r in zip(batches, results):
        assert r == [expected[i] for i in b]
    assert not src._users
    src.close()
    assert all(r is None for r in src._readers)


# --- hardening -------------------------------------------------------------------------------------


def _open_fds(name_part: str) -> int:
    n = testing.open_file_count(name_part)
    if n is None:
        pytest.skip("needs /proc/self/fd")
    return n



def test_iteration_honours_file_instructions(files):
    src = ArrayRecordDataSource(
        [FileInstruction(files[0], 2, 3, 10), FileInstruction(files[1], 18, -1, 20)]
    )
    assert list(src) == [_record(0, 2), _record(0, 3), _record(0, 4), _record(1, 18), _record(1, 19)]


def test_file_instruction_counts_and_types():
    with pytest.raises(ValueError, match=r"exceeds examples_in_shard \(10\)"):
        FileInstruction("x.array_record", skip=11, take=-1, examples_in_shard=10)
    with pytest.raises(ValueError, match="non-negative"):
        FileInstruction("x.array_record", skip=0, take=-2, examples_in_shard=10)
    with pytest.raises(ValueError, match="examples_in_shard must be given"):
        FileInstruction("x.array_record", skip=0, take=1)
    with pytest.raises(TypeError, match="FileInstruction.skip must be an int, got bool"):
        FileInstruction("x.array_record", skip=True, take=1, examples_in_shard=10)
    with pytest.raises(TypeError, match="filename must be a str or os.PathLike"):
        FileInstruction(7, skip=0, take=1, examples_in_shard=10)
    fi = FileInstruction(pathlib.Path("x.array_record"), np.int32(1), np.int64(2), 10)
    assert (fi.filename, fi.skip, fi.take) == ("x.array_record", 1, 2)
    assert type(fi.skip) is int


def test_reader_options_of_the_wrong_type_or_shape(files):
    for bad in (5, ["index_storage_option:in_memory"], {"max_parallelism": object()}):
        with pytest.raises(TypeError, match="reader_options"):
            ArrayRecordDataSource(files, reader_options=bad)
    with pytest.raises(ValueError, match="bad reader_options entry 'in_memory'"):
        ArrayRecordDataSource(files, reader_options="in_memory")
    with pytest.raises(ValueError, match=r"cannot open .*data-00000.*reader_options"):
        ArrayRecordDataSource(files, reader_options={"no_such_option": 1})[0]
    src = ArrayRecordDataSource(files, reader_options={"max_parallelism": 1})
    assert "max_parallelism:1" in src._reader_options and src[20] == _record(1, 10)


def test_non_integer_and_huge_indices(files, expected):
    src = ArrayRecordDataSource(files)
    with pytest.raises(TypeError, match="integers"):
        src.__getitems__([1.5, 2.0])  # must not be truncated to [1, 2]
    with pytest.raises(TypeError, match="integers"):
        src.__getitems__(np.array([True, False]))
    with pytest.raises(TypeError, match="1-D"):
        src.__getitems__([[1, 2], [3, 4]])
    with pytest.raises(TypeError):
        src["3"]
    with pytest.raises(IndexError, match="length 35"):
        src.__getitems__([2**70])
    assert src.__getitems__(np.array([34, 2], dtype=np.uint64)) == [expected[34], expected[2]]
    assert src.__getitems__(range(3)) == expected[:3]


def test_close_and_garbage_collection_release_file_handles(files):
    import gc

    before = _open_fds(".array_record")
    src = ArrayRecordDataSource(files)
    src.__getitems__([0, 12, 33])
    assert _open_fds(".array_record") == before + 3
    src.close()
    assert _open_fds(".array_record") == before
    src[0]
    del src
    gc.collect()
    assert _open_fds(".array_record") == before


def test_index_is_built_once_under_concurrent_first_use(files, expected):
    # Many threads race on the lazy index while close() runs: each must see the right length (a
    # reader closed under a count would report 0 records).
    for _ in range(5):
        src = ArrayRecordDataSource(files)
        with ThreadPoolExecutor(8) as pool:
            futs = [pool.submit(len, src) for _ in range(16)]
            src.close()
            assert {f.result() for f in futs} == {sum(SIZES)}
        assert src.__getitems__([34, 0]) == [expected[34], expected[0]]


class _CountingSource(ArrayRecordDataSource):
    """Counts the calls the kernel makes (the reads themselves are the real ones)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.calls = {"getitem": 0, "getitems": 0}

    def __getitem__(self, i):
        self.calls["getitem"] += 1
        return super().__getitem__(i)

    def __getitems__(self, keys):
        self.calls["getitems"] += 1
        return super().__getitems__(keys)


def test_kernel_batch_and_prefetch_read_through_getitems(files, expected):
    src = _CountingSource(files)
    batched = grain.MapDataset.source(src).map(len).batch(7)
    first = batched[0]
    assert first.tolist() == [len(r) for r in expected[:7]]
    assert src.calls == {"getitem": 0, "getitems": 1}
    src.calls.update(getitem=0, getitems=0)
    it = grain.MapDataset.source(src).to_iter_dataset(
        grain.ReadOptions(num_threads=2, prefetch_buffer_size=8)
    )
    assert list(it) == expected
    assert src.calls["getitem"] == 0 and 0 < src.calls["getitems"] < len(expected)


def test_cli_lists_the_plugin_with_its_version():
    testing.check_plugin_listed(
        "arrayrecord", "grain-plugin-arrayrecord", ["ArrayRecordDataSource", "FileInstruction"]
    )
