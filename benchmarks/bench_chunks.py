"""Issue 14 workloads: every pipeline shape with ``ReadOptions(num_threads=0,
prefetch_buffer_size=0)`` and with default options, beside the plain-Python floor.

The floor (``references["python floor"]``) is a plain loop making the same user calls (the map and
filter functions, the batch stacking) without any framework: the fastest a per-element pipeline could
go. ``BENCH_CHUNKS_N`` (default 200000) sets the number of elements, for quick runs.
"""

from __future__ import annotations

import os
import time

import numpy as np
from harness import Workload

_N = int(os.environ.get("BENCH_CHUNKS_N", "200000"))

import grain_core  # noqa: E402

grain_core.MapDataset.range(1)  # load the plugins now, not inside the first timed workload
_DOCS = max(_N // 4, 1000)
_BATCH = 32


def _plus_one(x):
    return x + 1


def _double(x):
    return x * 2


def _not_div3(x):
    return x % 3 != 0


def _options(lib, zero: bool):
    return lib.ReadOptions(num_threads=0, prefetch_buffer_size=0) if zero else lib.ReadOptions()


def _tag(zero: bool) -> str:
    return "threads=0 buffer=0" if zero else "default options"


def _batch_count(batch) -> int:
    return len(batch)


# --- map + batch through to_iter_dataset -----------------------------------------------------------


def _map_batch(lib, zero):
    return (
        lib.MapDataset.range(_N)
        .shuffle(seed=0)
        .map(_plus_one)
        .batch(_BATCH)
        .to_iter_dataset(_options(lib, zero))
    )


def _floor_map_batch():
    # The user calls: the map function per element and one batch stack per 32 elements. (The
    # shuffle is index arithmetic the framework does, not a user call.)
    buf = []
    for i in range(_N):
        buf.append(_plus_one(i))
        if len(buf) == _BATCH:
            yield np.asarray(buf)
            buf = []
    if buf:
        yield np.asarray(buf)


# --- IterDataset map -> filter -> batch -------------------------------------------------------------


def _iter_map_filter_batch(lib, zero):
    return (
        lib.MapDataset.range(_N)
        .to_iter_dataset(_options(lib, zero))
        .map(_double)
        .filter(_not_div3)
        .batch(_BATCH)
    )


def _floor_map_filter_batch():
    buf = []
    for i in range(_N):
        x = _double(i)
        if not _not_div3(x):
            continue
        buf.append(x)
        if len(buf) == _BATCH:
            yield np.asarray(buf)
            buf = []
    if buf:
        yield np.asarray(buf)


# --- FirstFit packing fed by an IterDataset -------------------------------------------------------


def _docs():
    rng = np.random.default_rng(0)
    lengths = rng.integers(16, 513, size=_DOCS)
    return [{"tokens": np.arange(n, dtype=np.int32)} for n in lengths.tolist()]


def _pack(lib, docs, zero):
    return lib.experimental.FirstFitPackIterDataset(
        lib.MapDataset.source(docs).to_iter_dataset(_options(lib, zero)),
        length_struct={"tokens": 2048},
        num_packing_bins=32,
        shuffle_bins=True,
        seed=0,
    )


def _packed_tokens(row) -> int:
    return int((row["tokens_segment_ids"] > 0).sum())


def _floor_pack(docs):
    # Plain Python first fit: each document goes into the first of 32 rows of 2048 tokens with
    # room for it; when none has room, the rows are emitted (tokens, segment ids, positions) and
    # refilled.
    length, bins = 2048, 32

    def fresh():
        return [
            (np.zeros(length, np.int32), np.zeros(length, np.int32), np.zeros(length, np.int32))
            for _ in range(bins)
        ]

    rows, used, segs = fresh(), [0] * bins, [0] * bins
    for doc in docs:
        tokens = doc["tokens"]
        n = len(tokens)
        b = next((i for i in range(bins) if used[i] + n <= length), None)
        if b is None:
            for (t, s, p), u in zip(rows, used):
                if u:
                    yield {"tokens": t, "tokens_segment_ids": s, "tokens_positions": p}
            rows, used, segs, b = fresh(), [0] * bins, [0] * bins, 0
        t, s, p = rows[b]
        u = used[b]
        segs[b] += 1
        t[u : u + n] = tokens
        s[u : u + n] = segs[b]
        p[u : u + n] = np.arange(n)
        used[b] = u + n
    for (t, s, p), u in zip(rows, used):
        if u:
            yield {"tokens": t, "tokens_segment_ids": s, "tokens_positions": p}


# --- window shuffle over an IterDataset -----------------------------------------------------------


def _window_shuffle(lib, zero):
    return lib.experimental.WindowShuffleIterDataset(
        lib.MapDataset.range(_N).to_iter_dataset(_options(lib, zero)), window_size=1000, seed=0
    )


def _floor_window_shuffle():
    # Plain Python: read windows of 1000 elements and yield them in a permuted order.
    rng = np.random.default_rng(0)
    it = iter(range(_N))
    while True:
        window = [x for _, x in zip(range(1000), it)]
        if not window:
            return
        for j in rng.permutation(len(window)).tolist():
            yield window[j]


# --- mix of two IterDatasets ------------------------------------------------------------------------


def _mix(lib, zero):
    a = lib.MapDataset.range(_N // 2).to_iter_dataset(_options(lib, zero)).map(_plus_one)
    b = lib.MapDataset.range(_N // 2).to_iter_dataset(_options(lib, zero)).map(_double)
    return lib.IterDataset.mix([a, b], [0.5, 0.5])


def _floor_mix():
    for i in range(_N // 2):
        yield _plus_one(i)
        yield _double(i)


# --- DataLoader with 0 workers -----------------------------------------------------------------------


def _loader(lib, zero):
    class PlusOne(lib.transforms.Map):
        def map(self, x):
            return x + 1

    source = lib.sources.RangeDataSource(0, _N, 1)
    sampler = lib.samplers.IndexSampler(
        num_records=len(source), shuffle=True, seed=0, num_epochs=1,
        shard_options=lib.sharding.NoSharding(),
    )
    return lib.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[PlusOne(), lib.transforms.Batch(_BATCH)],
        worker_count=0,
        read_options=_options(lib, zero),
    )


def _floor(gen, count=lambda _: 1):
    """A reference timing the plain generator ``gen`` through the same consumer loop as
    ``harness.measure`` (so the floor pays the same per-item cost of being consumed); ``gen``
    gets the workload's setup data, if any."""

    def run(*data) -> int:
        total = 0
        start = time.perf_counter()
        for item in gen(*data):
            total += count(item)
            if time.perf_counter() - start > 30:
                break
        return total

    return {"python floor": run}


def _workloads(zero: bool) -> list[Workload]:
    tag = _tag(zero)
    return [
        Workload(
            f"range({_N}).shuffle.map.batch(32).to_iter {tag}",
            lambda lib, z=zero: _map_batch(lib, z),
            count=_batch_count,
            target=5,
            references=_floor(_floor_map_batch, _batch_count),
        ),
        Workload(
            f"range({_N}).to_iter.map.filter.batch(32) {tag}",
            lambda lib, z=zero: _iter_map_filter_batch(lib, z),
            count=_batch_count,
            target=5,
            references=_floor(_floor_map_filter_batch, _batch_count),
        ),
        Workload(
            f"FirstFitPack {_DOCS} docs into 2048 x 32 bins {tag}",
            lambda lib, docs, z=zero: _pack(lib, docs, z),
            setup=_docs,
            count=_packed_tokens,
            unit="tokens",
            target=5,
            references=_floor(_floor_pack, _packed_tokens),
        ),
        Workload(
            f"WindowShuffleIterDataset(1000) over range({_N}) {tag}",
            lambda lib, z=zero: _window_shuffle(lib, z),
            target=5,
            references=_floor(_floor_window_shuffle),
        ),
        Workload(
            f"IterDataset.mix of two range({_N // 2}).to_iter.map {tag}",
            lambda lib, z=zero: _mix(lib, z),
            target=5,
            references=_floor(_floor_mix),
        ),
        Workload(
            f"DataLoader(worker_count=0) range({_N}) Map+Batch(32) {tag}",
            lambda lib, z=zero: _loader(lib, z),
            count=_batch_count,
            target=5,
            references=_floor(_floor_map_batch, _batch_count),
        ),
    ]


WORKLOADS = _workloads(True) + _workloads(False)
