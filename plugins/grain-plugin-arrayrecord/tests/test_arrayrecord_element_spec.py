"""ArrayRecordDataSource says its element spec (records are ``bytes``: scalars of object dtype),
so ``get_element_spec(MapDataset.source(...))`` answers; Grain 0.2.18 raises NotImplementedError."""

import functools

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter

import grain_core as grain
from grain_core import testing


def _write(path, n):
    w = ArrayRecordWriter(str(path), "group_size:1")
    for i in range(n):
        w.write(b"record-%03d" % i)
    w.close()
    return str(path)


def make(path):
    return grain.MapDataset.source(grain.sources.ArrayRecordDataSource([path])).shuffle(seed=2)


def test_array_record_element_spec(tmp_path):
    path = _write(tmp_path / "r.array_record", 5)
    spec = grain.experimental.get_element_spec(make(path))
    assert spec.shape == () and np.dtype(spec.dtype) == np.dtype(object)
    assert testing.check_element_spec(functools.partial(make, path), required=True)
    batched = grain.experimental.get_element_spec(make(path).batch(2, drop_remainder=True))
    assert batched.shape == (2,)
