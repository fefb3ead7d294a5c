"""Issue 3 workloads: mp_prefetch throughput, CPU-bound scaling, and restore latency."""

from __future__ import annotations

import atexit

import numpy as np
from cpu_work import heavy as _heavy  # in a module worker processes can import by name
from cpu_work import heavy_chunk as _heavy_chunk
from harness import Workload

try:  # google's grain reads absl flags in mp_prefetch; the harness does not parse them.
    from absl import flags as _flags

    if not _flags.FLAGS.is_parsed():
        _flags.FLAGS.mark_as_parsed()
except ImportError:  # pragma: no cover
    pass

def _full64(x):
    return np.full((64,), x)




def _batched_mp(lib):
    return (
        lib.MapDataset.range(100_000)
        .shuffle(seed=0)
        .map(_full64)
        .batch(32)
        .to_iter_dataset()
        .mp_prefetch(lib.MultiprocessingOptions(num_workers=2))
    )


def _cpu_bound(lib, workers):
    ds = lib.MapDataset.range(30_000).map(_heavy).to_iter_dataset(lib.ReadOptions(num_threads=0))
    if workers:
        ds = ds.mp_prefetch(lib.MultiprocessingOptions(num_workers=workers))
    return ds


def _pool_ceiling() -> int:
    """The same 30,000 maps split over a plain ``multiprocessing`` pool of 2: what two processes can
    reach on this machine at all, with no pipeline around them."""
    import multiprocessing

    with multiprocessing.get_context("forkserver").Pool(2) as pool:
        pool.map(_heavy_chunk, [(0, 2), (0, 2)])  # start both processes before timing
        pool.map(_heavy_chunk, [(0, 15_000), (15_000, 30_000)])
    return 30_000


def _cpu_bound_loader(lib):
    """The same 30,000 maps through the ``DataLoader`` with 2 workers, at Grain's default buffer
    (``worker_buffer_size=1``) and default read options: an unshuffled ``IndexSampler`` over
    ``range(30_000)`` and one ``Map`` operation (``dataloader_cpu.HeavyMap``)."""
    from dataloader_cpu import HeavyMap

    sampler = lib.IndexSampler(
        num_records=30_000, shard_options=lib.NoSharding(), shuffle=False, num_epochs=1
    )
    return lib.DataLoader(
        data_source=range(30_000), sampler=sampler, operations=[HeavyMap()], worker_count=2
    )


def _ours_in_process(_lib):
    import grain_core

    return _cpu_bound(grain_core, 0)


_to_close: list = []


def _close_pending() -> None:
    while _to_close:
        _to_close.pop().close()


atexit.register(_close_pending)


def _restores(lib, n=200):
    """Built eagerly (outside the timed pass): an iterator advanced 50 elements, its state; the
    timed pass is ``n`` times ``set_state`` + first element, nothing else.

    Fair to both libraries: the same pipeline and worker count, the iterator created and advanced
    before the clock starts, and its ``close()`` (stopping worker processes) kept out of the timed
    pass: the harness closes the generator inside it, so the iterator is only closed when the next
    measurement is built (or at exit)."""
    _close_pending()
    it = iter(_batched_mp(lib))
    for _ in range(50):
        next(it)
    state = it.get_state()
    _to_close.append(it)

    def gen():
        for _ in range(n):
            it.set_state(state)
            yield next(it)

    return gen()


WORKLOADS = [
    Workload(
        "mp_prefetch(2) range(100k).shuffle.map(full64).batch(32)",
        _batched_mp,
        count=len,
        target=5,
    ),
    Workload(
        "mp_prefetch(2) CPU-bound map (~300us/elem)",
        lambda lib: _cpu_bound(lib, 2),
    ),
    Workload(
        "CPU-bound map: ours mp(2) vs ours in-process (grain column)",
        lambda lib: _cpu_bound(lib, 2),
        build_theirs=_ours_in_process,
        target=1.7,
        references={"multiprocessing.Pool(2), same map, no pipeline": _pool_ceiling},
        min_passes=3,
    ),
    Workload(
        "CPU-bound map: DataLoader workers=2 (ours only)",
        _cpu_bound_loader,
        compare=False,
        references={"multiprocessing.Pool(2), same map, no pipeline": _pool_ceiling},
        min_passes=3,
    ),
    Workload(
        "mp_prefetch(2) restore latency: set_state + first element",
        _restores,
        unit="restores",
        target=10,
        max_seconds=8,
    ),
]
