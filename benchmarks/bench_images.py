"""Issue 32 workloads: an image pipeline, the most common training input.

JPEG bytes (written with Pillow by :func:`image_work.make_jpegs`) -> decode -> random crop and flip
-> normalise -> batch, read in a shuffled order through ``mp_prefetch`` with 2 workers, through the
``DataLoader`` with 2 workers, and through ``mp_prefetch`` then ``device_put`` onto a jax CPU
device; each row side by side with google's grain. The limit is a plain ``multiprocessing.Pool(2)``
doing the same decode and augmentation (the reference column of the ``mp_prefetch`` and the
``DataLoader`` rows): it decodes all images, while a row counts the images it outputs (the
``mp_prefetch`` row drops ``EPOCHS * NUM_IMAGES % 64`` of them unread; the ``DataLoader``, as
Grain's, has each worker decode its share and drop its partial last batch).

A pass reads ``EPOCHS`` epochs (a new shuffle each; the ``DataLoader``'s sampler has
``num_epochs=EPOCHS``; the references decode every image ``EPOCHS`` times), timed from before
``iter()`` as every pass is (``harness.measure``), so each side's start-up (the pool's, the
workers' with their copy of the 34 MB source and their imports) counts once in about two seconds
of work, as it does once per run of a training job, and the rate is mostly that of the work.
``REPORTS`` prints the peak memory of each library's ``mp_prefetch`` pipeline (the Pss of the
process tree, as ``bench_memory`` measures).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
from harness import Workload
from image_work import decode_augment, decode_augment_range, make_jpegs, pool_init

NUM_IMAGES = 6_000
EPOCHS = 3
BATCH = 64
WORKERS = 2

_IMAGES: list[bytes] | None = None


def _images() -> list[bytes]:
    global _IMAGES
    if _IMAGES is None:
        _IMAGES = make_jpegs(NUM_IMAGES)
    return _IMAGES


def _is_ours(lib) -> bool:
    return lib.__name__.partition(".")[0] == "grain_core"


def _dataset(lib, images, workers=WORKERS):
    ds = (
        lib.MapDataset.source(images)
        .shuffle(seed=0)
        .repeat(EPOCHS)
        .random_map(decode_augment, seed=1)
        .batch(BATCH, drop_remainder=True)
        .to_iter_dataset()
    )
    if workers:
        ds = ds.mp_prefetch(lib.MultiprocessingOptions(num_workers=workers))
    return ds


def _device_put(lib, images):
    import jax

    return lib.experimental.device_put(_dataset(lib, images), jax.devices("cpu")[0])


def _loader(lib, images):
    from image_ops import operation_class

    if not _is_ours(lib):
        import grain.python as lib
    sampler = lib.IndexSampler(
        num_records=len(images),
        shard_options=lib.NoSharding(),
        shuffle=True,
        num_epochs=EPOCHS,
        seed=0,
    )
    batch = lib.transforms.Batch if _is_ours(lib) else lib.Batch
    return lib.DataLoader(
        data_source=images,
        sampler=sampler,
        operations=[
            operation_class("grain_core" if _is_ours(lib) else "grain")(),
            batch(batch_size=BATCH, drop_remainder=True),
        ],
        worker_count=WORKERS,
    )


def _pool_limit(images) -> int:
    """Every image decoded and augmented ``EPOCHS`` times by a plain ``multiprocessing.Pool(2)``,
    half each, every worker sent the examples once (as a pipeline's workers are): the machine's
    limit for this work with no pipeline around it (the pool's start counts, as a row's
    ``iter()`` does)."""
    import multiprocessing

    half = len(images) // 2
    spans = [(0, half), (half, len(images))] * EPOCHS
    ctx = multiprocessing.get_context("forkserver")
    with ctx.Pool(WORKERS, initializer=pool_init, initargs=(images,)) as pool:
        done = pool.map(decode_augment_range, spans, chunksize=1)
    return sum(done)


def _in_process_limit(images) -> int:
    for _ in range(EPOCHS):
        for i, data in enumerate(images):
            decode_augment(data, np.random.default_rng(i))
    return EPOCHS * len(images)


_NAME = f"images {NUM_IMAGES}x JPEG 96px x {EPOCHS} epochs decode+crop+flip+normalise batch({BATCH})"

WORKLOADS = [
    Workload(
        f"{_NAME} in process",
        lambda lib, images: _dataset(lib, images, workers=0),
        count=len,
        unit="images",
        setup=_images,
        references={"plain loop, one process": _in_process_limit},
    ),
    Workload(
        f"{_NAME} mp_prefetch({WORKERS})",
        _dataset,
        count=len,
        unit="images",
        setup=_images,
        references={f"multiprocessing.Pool({WORKERS})": _pool_limit},
        min_passes=3,
    ),
    Workload(
        f"{_NAME} DataLoader workers={WORKERS}",
        _loader,
        count=len,
        unit="images",
        setup=_images,
        # Timed in this row too, in turn with the loader's passes: its share needs no other row's.
        references={f"multiprocessing.Pool({WORKERS})": _pool_limit},
        min_passes=3,
    ),
    Workload(
        f"{_NAME} mp_prefetch({WORKERS}) + device_put(cpu)",
        _device_put,
        count=len,
        unit="images",
        setup=_images,
    ),
]


def _pss(pid: int) -> int:
    """One process's ``Pss`` bytes (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _memory_by_role(root: int) -> dict[str, int]:
    """``Pss`` bytes of ``root``'s process tree by role: ``consumer`` (``root`` itself),
    ``forkserver`` (the helper the workers are forked from) and ``workers`` (every other
    descendant), and their sum, ``total`` (what ``bench_memory._tree_memory`` reads)."""
    roles = dict.fromkeys(("consumer", "forkserver", "workers"), 0)
    stack = [(root, 0)]
    while stack:
        p, parent = stack.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack += [(int(c), p) for c in f.read().split()]
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError):
            continue
        # Workers forked by the forkserver carry its command line too: only the consumer's own
        # child is the forkserver.
        if p == root:
            role = "consumer"
        elif parent == root and b"forkserver" in cmdline:
            role = "forkserver"
        else:
            role = "workers"
        roles[role] += _pss(p)
    roles["total"] = sum(roles.values())
    return roles


def _child(library: str) -> None:
    """Runs one library's ``mp_prefetch`` image pipeline over every image and prints, as JSON, its
    peak tree Pss above the tree's memory before iterating, and what each role held at that peak."""
    from bench_memory import MB

    if library == "grain_core":
        import grain_core as lib
    else:
        import grain as lib
        from absl import flags

        flags.FLAGS.mark_as_parsed()
    images = _images()
    pid = os.getpid()
    base = _memory_by_role(pid)
    peak = base
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            now = _memory_by_role(pid)
            if now["total"] > peak["total"]:
                peak = now
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    count = 0
    try:
        for batch in _dataset(lib, images):
            count += len(batch)
    finally:
        stop.set()
        sampler.join(timeout=5)
    row = {"library": library, "images": count, "peak_mb": (peak["total"] - base["total"]) / MB}
    row["consumer_mb"] = (peak["consumer"] - base["consumer"]) / MB  # above its own start
    row["forkserver_mb"] = peak["forkserver"] / MB
    row["workers_mb"] = peak["workers"] / MB
    print(json.dumps(row))


def images_memory_report() -> None:
    """Peak memory (tree Pss above the starting point) of the ``mp_prefetch`` image row, per library,
    and what held it at the peak: the consumer's growth, the forkserver, the workers together (each
    worker holds an interpreter, its copy of the source, and its pipeline's read-ahead)."""
    print(
        f"{'image pipeline peak memory, mp_prefetch(2)':<58} {'peak MB':>8}"
        f" {'consumer':>9} {'forkserver':>11} {'workers':>8}"
    )
    for library in ("grain_core", "grain"):
        proc = subprocess.run(
            [sys.executable, __file__, "child", library],
            capture_output=True,
            text=True,
            timeout=600,
            env=dict(os.environ, JAX_PLATFORMS="cpu"),
        )
        if proc.returncode:
            tail = " ".join(proc.stderr.strip().splitlines()[-1:])
            print(f"{library:<58} failed: {tail}")
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{library:<58} {row['peak_mb']:>8.0f} {row['consumer_mb']:>9.0f}"
            f" {row['forkserver_mb']:>11.0f} {row['workers_mb']:>8.0f}",
            flush=True,
        )


REPORTS = [images_memory_report]

if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    _child(sys.argv[2])
