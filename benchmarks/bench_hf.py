"""Issue 31 workloads: Hugging Face ``datasets`` as sources.

A shuffled epoch of 200k rows of (text, int list, small float array, label) from a dataset saved
with ``save_to_disk`` and opened with ``load_from_disk`` (memory-mapped Arrow, as a real training
job reads it), read by

* grain_core: ``MapDataset.source(HuggingFaceDataSource(ds)).shuffle(seed=0).to_iter_dataset()``;
* grain: the tutorial wrapper, ``grain.MapDataset.source(ds).shuffle(seed=0).to_iter_dataset()``
  over the dataset itself (one ``ds[i]`` per row);
* the floor: ``ds.with_format("numpy")[indices]`` over the same order in chunks of 1024 indices
  (``datasets``' own batched read, no per-row work).

And a streaming epoch (``to_iterable_dataset(num_shards=8)``) through ``HuggingFaceIterDataset``,
plain and with a checkpoint restore in the middle, against iterating the ``IterableDataset`` itself.
Run: ``python benchmarks/run.py -k HF`` (or ``nox -s bench -- -k HF``).
"""

from __future__ import annotations

import os

import numpy as np
from harness import Workload, scratch_dir

ROWS = 200_000
CHUNK = 1024
SHARDS = 8
_CACHE: dict[str, object] = {}


def _setup():
    if "ds" in _CACHE:
        return _CACHE["ds"]
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 16, size=ROWS)
    data = {
        "text": [f"example number {i} of the benchmark" for i in range(ROWS)],
        "tokens": [list(range(int(n))) for n in lengths],
        "vec": rng.random((ROWS, 4), dtype=np.float32).tolist(),
        "label": list(range(ROWS)),
    }
    path = str(scratch_dir("bench_hf_") / "ds")
    datasets.Dataset.from_dict(data).save_to_disk(path)
    ds = datasets.load_from_disk(path)
    _CACHE["ds"] = ds
    return ds


def _ours(lib, ds):
    src = lib.sources.HuggingFaceDataSource(ds)
    return lib.MapDataset.source(src).shuffle(seed=0).to_iter_dataset()


def _tutorial(lib, ds):
    return lib.MapDataset.source(ds).shuffle(seed=0).to_iter_dataset()


def _floor(ds):
    """``datasets``' own batched read of the same shuffled order, chunk by chunk."""
    import grain_core

    order = np.asarray(list(grain_core.MapDataset.range(ROWS).shuffle(seed=0)))
    numpy_ds = ds.with_format("numpy")
    n = 0
    for start in range(0, ROWS, CHUNK):
        batch = numpy_ds[order[start : start + CHUNK]]
        n += len(batch["label"])
    return n


def _stream(lib, ds):
    return lib.experimental.HuggingFaceIterDataset(ds.to_iterable_dataset(num_shards=SHARDS))


def _stream_with_restore(lib, ds):
    """The streaming epoch, checkpointed after half of it and continued in a new iterator."""

    def run():
        make = lambda: iter(_stream(lib, ds))  # noqa: E731
        it = make()
        for _ in range(ROWS // 2):
            yield next(it)
        state = it.get_state()
        it.close()
        it = make()
        it.set_state(state)
        yield from it

    class _Once:
        def __iter__(self):
            return run()

    return _Once()


def _raw_stream(ds):
    n = 0
    for _ in ds.to_iterable_dataset(num_shards=SHARDS):
        n += 1
    return n


WORKLOADS = [
    Workload(
        "HF Dataset 200k rows shuffled epoch: HuggingFaceDataSource vs grain's MapDataset.source",
        _ours,
        build_theirs=_tutorial,
        unit="rows",
        target=5,
        setup=_setup,
        references={"floor: with_format('numpy')[1024 indices]": _floor},
        max_seconds=60.0,
    ),
    Workload(
        "HF IterableDataset 200k rows (8 shards) HuggingFaceIterDataset (grain has none)",
        _stream,
        compare=False,
        unit="rows",
        setup=_setup,
        references={"IterableDataset iterated itself": _raw_stream},
    ),
    Workload(
        "HF IterableDataset 200k rows, restored at 100k (grain has none)",
        _stream_with_restore,
        compare=False,
        unit="rows",
        setup=_setup,
        references={"IterableDataset iterated itself": _raw_stream},
    ),
]
