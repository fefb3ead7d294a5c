"""Writes the TFRecord test files of this directory with TensorFlow's own writer.

Run manually in a side virtual environment with TensorFlow (the plugin and its tests never need it)::

    uv venv /tmp/tf-side -p 3.11 && VIRTUAL_ENV=/tmp/tf-side uv pip install tensorflow-cpu
    /tmp/tf-side/bin/python plugins/grain-plugin-tfrecord/tests/data/write_with_tensorflow.py

Every file is written by ``tf.io.TFRecordWriter``; ``expected.json`` lists, per file, each record's
SHA-256 and length as TensorFlow reads them back (``tf.data.TFRecordDataset``), so the tests can
compare without TensorFlow.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import tensorflow as tf

HERE = pathlib.Path(__file__).parent


def records() -> dict[str, list[bytes]]:
    rng = np.random.default_rng(20261123)
    varied = [b"", b"a", b"\x00" * 3]
    for n in (7, 8, 255, 256, 4095, 4096, 70_000):
        varied.append(rng.integers(0, 256, size=n, dtype=np.uint8).tobytes())
    varied.append(b"")
    examples = []
    for i in range(5):
        ex = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    "text": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[f"doc {i}".encode()])
                    ),
                }
            )
        )
        examples.append(ex.SerializeToString())
    return {
        "plain.tfrecord": [f"record {i}".encode() for i in range(10)],
        "varied_sizes.tfrecord": varied,
        "empty_file.tfrecord": [],
        "single_empty_record.tfrecord": [b""],
        "examples.tfrecord": examples,
    }


def main() -> None:
    expected = {
        "_comment": f"Written by tf.io.TFRecordWriter (TensorFlow {tf.__version__}) with "
        "write_with_tensorflow.py; per file, each record's length and sha256 as read back by "
        "tf.data.TFRecordDataset.",
        "files": {},
    }
    for name, recs in records().items():
        path = HERE / name
        with tf.io.TFRecordWriter(str(path)) as w:
            for r in recs:
                w.write(r)
        read = [bytes(x.numpy()) for x in tf.data.TFRecordDataset(str(path))]
        assert read == recs, name
        expected["files"][name] = [
            {"length": len(r), "sha256": hashlib.sha256(r).hexdigest()} for r in read
        ]
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
