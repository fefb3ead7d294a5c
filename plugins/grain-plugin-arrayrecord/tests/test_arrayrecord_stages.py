"""The conformance kit's stage checks for ArrayRecordDataSource in a pipeline."""

import functools

from array_record.python.array_record_module import ArrayRecordWriter

import grain_core as grain
from grain_core import testing


def _write(path, n):
    w = ArrayRecordWriter(str(path), "group_size:1")
    for i in range(n):
        w.write(b"record-%03d" % i)
    w.close()
    return str(path)


def make(paths):
    return grain.MapDataset.source(grain.sources.ArrayRecordDataSource(paths)).shuffle(seed=2)


def test_array_record_source_conforms(tmp_path):
    paths = [_write(tmp_path / f"part-{f}.array_record", 20 + f) for f in range(2)]
    testing.check_stage(
        functools.partial(make, paths), foreign=functools.partial(make, paths[:1])
    )
