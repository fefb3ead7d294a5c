"""MaxText's TFRecord input pipeline shape on grain_core: one ``TFRecordIterDataset`` per file,
interleaved, produced by worker processes, checkpointed mid-way. The files were written by
TensorFlow's ``tf.io.TFRecordWriter`` (see plugins/grain-plugin-tfrecord/tests/data)."""

from __future__ import annotations

import pathlib

from grain_plugin_tfrecord import read_records

import grain_core as grain

DATA = pathlib.Path(__file__).parents[2] / "plugins" / "grain-plugin-tfrecord" / "tests" / "data"
FILES = [str(DATA / n) for n in ("plain.tfrecord", "examples.tfrecord", "varied_sizes.tfrecord")]


def _pipeline():
    ds = grain.MapDataset.source(FILES).map(grain.experimental.TFRecordIterDataset)
    return grain.experimental.InterleaveIterDataset(ds, cycle_length=2)


def test_interleaved_tfrecord_files_in_worker_processes_resume_from_a_checkpoint():
    expected = sorted(r for f in FILES for r in read_records(f))
    assert sorted(_pipeline()) == expected
    ds = _pipeline().mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    with iter(ds) as it:
        head = [next(it) for _ in range(7)]
        state = it.get_state()
        tail = list(it)
    assert sorted(head + tail) == expected
    with iter(ds) as resumed:
        resumed.set_state(state)
        assert list(resumed) == tail
