"""Records google grain's outputs for the compatibility names into ``data/grain_0_2_18_outputs.json``.

Run manually in a side venv with google's grain 0.2.18 installed (see ``record_grain_surface.py``)::

    /tmp/grain-side/bin/python tests/compat/record_grain_outputs.py

``test_compat_behaviour.py`` compares grain_core with these outputs; it never needs grain.
"""

from __future__ import annotations

import json
import logging
import pathlib

import numpy as np

OUT = pathlib.Path(__file__).parent / "data" / "grain_0_2_18_outputs.json"


def _plain(x):
    if isinstance(x, np.ndarray):
        return {"array": x.tolist(), "dtype": str(x.dtype)}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in sorted(x.items())}
    if isinstance(x, np.generic):
        return x.item()
    return x


def main() -> None:
    import sys

    from absl import flags

    flags.FLAGS(sys.argv[:1])  # Grain's multiprocessing reads absl flags
    import grain
    import grain.python as pg
    from grain._src.python.record import Record, RecordMetadata

    logging.disable(logging.CRITICAL)
    out: dict = {
        "_comment": f"Recorded from google grain {grain.__version__} by "
        "tests/compat/record_grain_outputs.py; do not edit by hand.",
    }

    pool = grain.experimental.RngPool(42)
    out["rng_pool"] = [
        {"seed": 42, "index": i, "op_seed": s, "integers": pool.acquire_rng(i, op_seed=s).integers(0, 2**62, size=3).tolist()}
        for i, s in [(0, 0), (5, 0), (5, 3), (2**40, 7)]
    ]

    cases = []
    for gbs, (si, sc), mp in [(5, (0, 1), None), (2, (0, 2), None), (8, (2, 4), None), (2, (0, 2), 2)]:
        ds = grain.MapDataset.range(10).map(lambda x: x + 1)
        opts = grain.MultiprocessingOptions(num_workers=mp) if mp else None
        it = grain.experimental.ElasticIterator(ds, gbs, grain.sharding.ShardOptions(si, sc), multiprocessing_options=opts)
        batches = []
        states = [it.get_state()]
        for b in it:
            batches.append(b.tolist())
            states.append(it.get_state())
        cases.append({"global_batch_size": gbs, "shard_index": si, "shard_count": sc, "num_workers": mp, "batches": batches, "states": states})
    out["elastic_iterator"] = cases

    def records(values):
        return [Record(RecordMetadata(index=i, record_key=i + 100), v) for i, v in enumerate(values)]

    def dump(recs):
        return [{"index": r.metadata.index, "record_key": r.metadata.record_key, "data": _plain(r.data)} for r in recs]

    data = [{"a": np.arange(3) + i, "b": i} for i in range(5)]
    out["operations"] = {
        "map": dump(pg.MapOperation(lambda d: d["b"] * 2)(iter(records(data)))),
        "filter": dump(pg.FilterOperation(lambda d: d["b"] % 2 == 0)(iter(records(data)))),
        "batch_2": dump(pg.BatchOperation(2)(iter(records(data)))),
        "batch_2_drop": dump(pg.BatchOperation(2, drop_remainder=True)(iter(records(data)))),
    }
    seqs = [{"tokens": np.arange(n) + 10 * n, "mask": np.ones(n, dtype=np.int32)} for n in (3, 2, 4, 1, 5, 2)]
    op = grain.experimental.PackAndBatchOperation(length_struct={"tokens": 6, "mask": 6}, batch_size=2)
    out["pack_and_batch"] = dump(op(iter(records(seqs))))
    op = grain.experimental.PackAndBatchOperation(length_struct={"tokens": 6, "mask": 6}, batch_size=2, max_sequences_per_bin=1)
    out["pack_and_batch_max1"] = dump(op(iter(records(seqs))))

    def spec(s):
        return grain.experimental.get_element_spec(s)

    class WithSpec(grain.transforms.Map):
        def map(self, x):
            return {"x": np.full((3,), x, np.float32)}

        def output_spec(self, input_spec):
            return {"x": grain.experimental.ShapeDtypeStruct(shape=(3,), dtype=np.float32)}

    r = grain.MapDataset.range(10)
    specs = {
        "range": spec(r),
        "range_batch3": spec(r.batch(3)),
        "range_batch3_drop": spec(r.batch(3, drop_remainder=True)),
        "map_spec_batch": spec(r.shuffle(1).map(WithSpec()).batch(2, drop_remainder=True)),
        "iter_map_spec": spec(r.to_iter_dataset().map(WithSpec()).batch(4)),
    }
    out["element_specs"] = {k: json.loads(json.dumps(v, default=lambda s: {"shape": list(s.shape), "dtype": np.dtype(s.dtype).name})) for k, v in specs.items()}

    mt = grain.experimental.multithread_prefetch(grain.MapDataset.range(11).map(lambda x: x * 2).to_iter_dataset(), 3, 2)
    out["multithread_prefetch_3"] = [int(x) for x in mt]

    cache_ds = grain.experimental.CacheIterDataset(grain.MapDataset.range(5).to_iter_dataset())
    it = iter(cache_ds)
    first = [int(next(it)) for _ in range(3)]
    st = it.get_state()
    rest = [int(x) for x in it]
    it.set_state(st)
    again = [int(x) for x in it]
    out["cache"] = {"first": first, "rest": rest, "again_from_state": again, "state_keys": sorted(st)}

    zipped = grain.experimental.ZipIterDataset([grain.MapDataset.range(3).to_iter_dataset(), grain.MapDataset.range(5).to_iter_dataset()])
    try:
        list(zipped)
        out["zip_strict_error"] = None
    except ValueError as e:
        out["zip_strict_error"] = str(e)
    out["zip_not_strict"] = [list(map(int, t)) for t in grain.experimental.ZipIterDataset(
        [grain.MapDataset.range(3).to_iter_dataset(), grain.MapDataset.range(5).to_iter_dataset()], strict=False)]

    rep = grain.MapDataset.range(4).map(lambda x: x * 3).repeat(3, reseed_each_epoch=False)
    out["repeat_no_reseed_len"] = len(rep)

    src = grain.sources.SharedMemoryDataSource([1, "a", b"x", 2.5])
    try:
        items = [src[i].decode() if isinstance(src[i], bytes) else src[i] for i in range(len(src))]
        out["shared_memory_source"] = {"len": len(src), "items": items, "str_prefix": str(src).split("(")[0]}
    finally:
        src.close()
        src.unlink()

    OUT.write_text(json.dumps(_plain(out), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
