"""The pipelines whose outputs were recorded from google grain 0.2.18 (see ``record_grain.py``).

Each case is Python source run with ``grain`` bound to the module under test (Grain when recording,
``grain_core`` when testing) and ``np`` to NumPy; it sets ``result``. ``run_case`` turns datasets and
iterators into lists and NumPy values into plain JSON values.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

MAX_ELEMENTS = 3000


def to_json(value: Any) -> Any:
    """Plain JSON value of ``value`` (NumPy arrays and scalars, tuples, dicts, bytes)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    if hasattr(value, "__iter__"):
        return [to_json(v) for v in itertools.islice(value, MAX_ELEMENTS)]
    raise TypeError(f"cannot record a {type(value).__name__}")


def run_case(code: str, grain: Any, np: Any) -> Any:
    """Runs ``code`` and returns its ``result`` as a JSON value."""
    namespace = {"grain": grain, "np": np, "json": json, "itertools": itertools}
    exec(code, namespace)  # noqa: S102 - the cases are this file's own fixed source
    return json.loads(json.dumps(to_json(namespace["result"])))


_SIZES = [1, 2, 3, 5, 10, 17, 64, 100, 255, 256, 257, 1000]
_SEEDS = [0, 1, 42, 12345, 2**32 - 1]

SHUFFLE = [
    f"result = grain.MapDataset.range({n}).shuffle(seed={s})" for n in _SIZES for s in _SEEDS
] + [
    "result = grain.MapDataset.range(7).shuffle(seed=3).repeat(3)",
    "result = grain.MapDataset.range(5).repeat(3).shuffle(seed=1)",
    "result = grain.MapDataset.range(4).shuffle(seed=2**32 - 1).repeat(3)",
    "result = grain.MapDataset.range(10).shuffle(seed=5).to_iter_dataset()",
    "result = grain.MapDataset.range(100000).shuffle(seed=7)[::997]",
    "result = [grain.MapDataset.range(2**20).shuffle(seed=9)[i] for i in (0, 1, 12345, 2**20 - 1, 2**20 + 3)]",
    "result = list(grain.MapDataset.range(65537).shuffle(seed=1)[:50])",
    "result = len(set(grain.MapDataset.range(65537).shuffle(seed=1)))",
    "result = grain.MapDataset.range(20).shuffle(seed=np.uint32(4))",
    "result = grain.MapDataset.range(20).shuffle(seed=np.int64(4))",
    "result = grain.MapDataset.range(10).shuffle(seed=-1)",
    "result = grain.MapDataset.range(10).shuffle(seed=2**32)",
    "result = grain.MapDataset.source(list('abcdefgh')).shuffle(seed=11).batch(3)",
] + [
    f"result = [grain.experimental.index_shuffle(i, max_index={m}, seed={s}, rounds={r}) for i in {idx}]"
    for m, idx in [
        (0, "[0]"),
        (9, "range(10)"),
        (1000, "range(0, 1001, 7)"),
        (65535, "range(0, 65536, 4099)"),
        (65536, "range(0, 65537, 4099)"),
        (70000, "range(0, 70001, 3001)"),
        (2**40, "[0, 1, 2, 10**9, 2**40]"),
        (2**63 - 1, "[0, 1, 2**62, 2**63 - 1]"),
    ]
    for s in (0, 77)
    for r in (4, 8)
] + [
    "result = grain.experimental.index_shuffle(0, max_index=8, seed=3, rounds=2)",
    "result = grain.experimental.index_shuffle(9, max_index=8, seed=3, rounds=4)",
]

_F = "lambda x, rng: (x, int(rng.integers(0, 10**6)), float(rng.random()))"
SEEDS = [
    "result = grain.MapDataset.range(10).seed(3).shuffle()",
    "result = grain.MapDataset.range(10).seed(0).shuffle()",
    "result = grain.MapDataset.range(10).seed(3).map(lambda x: x * 2).shuffle()",
    "result = grain.MapDataset.range(10).seed(3).map(lambda x: x).map(lambda x: x).shuffle()",
    f"result = grain.MapDataset.range(10).seed(3).shuffle().random_map({_F})",
    "result = grain.MapDataset.range(10).seed(1).shuffle().seed(2).shuffle()",
    "result = grain.MapDataset.range(10).seed(1).shuffle().shuffle()",
    "result = grain.MapDataset.mix([grain.MapDataset.range(5).seed(1), grain.MapDataset.range(5, 10).seed(2)]).shuffle()",
    "result = grain.MapDataset.mix([grain.MapDataset.range(5).seed(1).shuffle(), grain.MapDataset.range(5, 10).seed(2).shuffle()])",
    f"result = grain.MapDataset.range(6).random_map({_F}, seed=7)",
    f"result = grain.MapDataset.range(6).random_map({_F}, seed=0)",
    f"result = grain.MapDataset.range(6).random_map({_F}, seed=2**40)",
    f"result = grain.MapDataset.range(6).seed(2**40).random_map({_F})",
    f"result = grain.MapDataset.range(6).seed(5).random_map({_F}).random_map({_F})",
    f"result = grain.MapDataset.range(6).to_iter_dataset().random_map({_F}, seed=7)",
    f"result = grain.MapDataset.range(6).seed(3).to_iter_dataset().random_map({_F})",
    f"result = grain.MapDataset.range(6).to_iter_dataset().seed(3).random_map({_F})",
    f"result = grain.MapDataset.range(6).seed(3).to_iter_dataset().filter(lambda x: x % 2).random_map({_F})",
    "result = grain.MapDataset.range(5).seed(3).shuffle().repeat(3)",
    "result = grain.MapDataset.range(5).seed(3).shuffle().repeat(3, reseed_each_epoch=False)",
    f"result = grain.MapDataset.range(3).random_map({_F}, seed=1).repeat(2)",
    f"result = grain.MapDataset.range(3).repeat(2).random_map({_F}, seed=1)",
    f"result = grain.MapDataset.range(3).random_map({_F}, seed=1).repeat(2, reseed_each_epoch=False)",
    "result = grain.MapDataset.range(10).seed(np.uint32(9)).shuffle()",
    "result = grain.MapDataset.range(10).seed(3).batch(2).shuffle()",
    "result = grain.MapDataset.range(10).seed(3).shuffle().batch(3).shuffle()",
    "result = grain.MapDataset.range(12).seed(3).slice(slice(2, 10)).shuffle()",
    "result = grain.MapDataset.range(12).seed(3)[2:10].shuffle()",
    "result = grain.MapDataset.range(12).seed(3).filter(lambda x: x % 3).shuffle()",
    f"result = grain.MapDataset.range(8).seed(4).map_with_index(lambda i, x: x).random_map({_F})",
    f"result = grain.MapDataset.range(8).seed(4).to_iter_dataset().map(lambda x: x).random_map({_F})",
    "result = grain.MapDataset.range(8).seed(4).to_iter_dataset().batch(2).random_map(lambda x, rng: int(rng.integers(100)))",
]

WINDOW = [
    "result = grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(20), window_size=6, seed=3)",
    "result = grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(1000), window_size=128, seed=0)[::13]",
    "result = grain.experimental.WindowShuffleIterDataset(grain.MapDataset.range(20).to_iter_dataset(), window_size=6, seed=3)",
    "result = grain.experimental.WindowShuffleIterDataset(grain.MapDataset.range(300).to_iter_dataset(), window_size=64, seed=99)",
    "result = grain.experimental.WindowShuffleIterDataset(grain.MapDataset.range(5).repeat(3).to_iter_dataset(), window_size=4, seed=1)",
]

_A = "grain.MapDataset.range(0, 10)"
_B = "grain.MapDataset.range(100, 105)"
_C = "grain.MapDataset.range(200, 230)"
MIX = [
    f"result = grain.MapDataset.mix([{_A}, {_B}])",
    f"result = grain.MapDataset.mix([{_A}, {_B}], [1, 2])",
    f"result = grain.MapDataset.mix([{_A}, {_B}], [0.3, 0.7])",
    f"result = grain.MapDataset.mix([{_A}, {_B}, {_C}], [1, 1, 2])",
    f"result = grain.MapDataset.mix([{_A}, {_B}, {_C}], [0.5, 0.25, 0.25])",
    f"result = grain.MapDataset.mix([{_A}, {_B}], [2, 1]).repeat(2)",
    f"result = len(grain.MapDataset.mix([{_A}, {_B}, {_C}], [1, 1, 2]))",
    f"result = grain.MapDataset.mix([{_A}.repeat(), {_B}.repeat()], [1, 3])[:40]",
    f"result = grain.MapDataset.mix([{_A}, {_B}], [1, 0])",
    f"result = grain.IterDataset.mix([{_A}.to_iter_dataset(), {_B}.to_iter_dataset()])",
    f"result = grain.IterDataset.mix([{_A}.to_iter_dataset(), {_B}.to_iter_dataset()], [1, 2])",
    f"result = grain.IterDataset.mix([{_A}.repeat().to_iter_dataset(), {_B}.repeat().to_iter_dataset()], [0.2, 0.8])",
    f"result = itertools.islice(grain.IterDataset.mix({{'b': {_B}.repeat().to_iter_dataset(), 'a': {_A}.repeat().to_iter_dataset()}}, {{'b': 1, 'a': 3}}), 40)",
    f"result = itertools.islice(grain.IterDataset.mix({{'z': {_B}.repeat().to_iter_dataset(), 'a': {_A}.repeat().to_iter_dataset(), 'm': {_C}.repeat().to_iter_dataset()}}), 30)",
    f"result = grain.MapDataset.concatenate([{_A}, {_B}])",
    f"result = grain.MapDataset.concatenate([{_A}, {_B}]).repeat(2)[::3]",
]

INTERLEAVE = [
    "result = grain.experimental.InterleaveIterDataset([grain.MapDataset.range(i * 10, i * 10 + 4) for i in range(5)], cycle_length=2)",
    "result = grain.experimental.InterleaveIterDataset([grain.MapDataset.range(i * 10, i * 10 + i + 1) for i in range(5)], cycle_length=3)",
    "result = grain.experimental.InterleaveIterDataset([grain.MapDataset.range(i * 10, i * 10 + 3).to_iter_dataset() for i in range(4)], cycle_length=1)",
    "result = grain.experimental.InterleaveIterDataset(grain.MapDataset.range(4).map(lambda i: grain.MapDataset.range(i * 10, i * 10 + 3)), cycle_length=2)",
    "result = grain.experimental.InterleaveIterDataset(grain.MapDataset.range(6).seed(1).shuffle().map(lambda i: grain.MapDataset.range(i * 10, i * 10 + 2)), cycle_length=4)",
]

_SRC = "list(range(100, 100 + {n}))"


def _loader(n: int, sampler: str, ops: str = "[]", workers: int = 0, extra: str = "") -> str:
    return (
        f"result = grain.DataLoader(data_source={_SRC.format(n=n)}, sampler={sampler}, "
        f"operations={ops}, worker_count={workers}{extra})"
    )


LOADER = [
    _loader(8, "grain.samplers.IndexSampler(8, num_epochs=1)", "[grain.transforms.Batch(4)]", 2),
    _loader(8, "grain.samplers.IndexSampler(8, num_epochs=1)", "[grain.transforms.Batch(4)]", 0),
    _loader(10, "grain.samplers.IndexSampler(10, num_epochs=1)", "[grain.transforms.Batch(4)]", 2),
    _loader(10, "grain.samplers.IndexSampler(10, num_epochs=1)", "[grain.transforms.Batch(3, drop_remainder=True)]", 3),
    _loader(9, "grain.samplers.IndexSampler(9, num_epochs=2)", "[grain.transforms.Batch(2)]", 2),
    _loader(10, "grain.samplers.IndexSampler(10, num_epochs=1, shuffle=True, seed=3)", "[]", 0),
    _loader(10, "grain.samplers.IndexSampler(10, num_epochs=2, shuffle=True, seed=3)", "[]", 0),
    _loader(10, "grain.samplers.IndexSampler(10, num_epochs=2, shuffle=True, seed=3)", "[grain.transforms.Batch(3)]", 2),
    _loader(20, "grain.samplers.IndexSampler(20, num_epochs=1)", "[]", 0),
    _loader(20, "grain.samplers.IndexSampler(5, num_epochs=1)", "[]", 0),
    _loader(20, "grain.samplers.IndexSampler(5, num_epochs=2, shuffle=True, seed=1)", "[]", 0),
    _loader(10, "grain.samplers.IndexSampler(10, grain.sharding.ShardOptions(0, 2), num_epochs=1)", "[]", 0),
    _loader(10, "grain.samplers.IndexSampler(10, grain.sharding.ShardOptions(1, 2), num_epochs=1)", "[]", 0),
    _loader(11, "grain.samplers.IndexSampler(11, grain.sharding.ShardOptions(1, 2, drop_remainder=True), num_epochs=2, shuffle=True, seed=5)", "[]", 0),
    _loader(11, "grain.samplers.IndexSampler(11, grain.sharding.ShardOptions(0, 2), num_epochs=2, shuffle=True, seed=5)", "[]", 0),
    _loader(10, "grain.samplers.IndexSampler(10, num_epochs=1, shuffle=True, seed=3)", "[]", 0, ", shard_options=grain.sharding.ShardOptions(1, 2)"),
    _loader(10, "grain.samplers.SequentialSampler(10)", "[]", 0),
    _loader(6, "grain.samplers.IndexSampler(6, num_epochs=1, seed=4)", "[grain.transforms.RandomMap.__new__(type('R', (grain.transforms.RandomMap,), {'random_map': lambda self, x, rng: (x, int(rng.integers(10**6)))}))]", 0),
    _loader(6, "grain.samplers.IndexSampler(6, num_epochs=1, seed=4)", "[grain.transforms.RandomMap.__new__(type('R', (grain.transforms.RandomMap,), {'random_map': lambda self, x, rng: (x, int(rng.integers(10**6)))}))]", 2),
    "s = grain.samplers.IndexSampler(12, grain.sharding.ShardOptions(1, 3), shuffle=True, num_epochs=2, seed=7)\n"
    "result = [s[i].record_key for i in range(1, 24, 3)]",
    "s = grain.samplers.IndexSampler(12, num_epochs=None, shuffle=True, seed=7)\nresult = [len(s) > 10**9, [s[i].record_key for i in range(30)]]",
    "s = grain.samplers.IndexSampler(5, num_epochs=1, seed=4)\nresult = [int(s[i].rng.integers(10**6)) for i in range(5)]",
    "s = grain.samplers.SequentialSampler(5, seed=4)\nresult = [[s[i].record_key, int(s[i].rng.integers(10**6))] for i in range(5)]",
    "result = repr(grain.samplers.IndexSampler(5, shuffle=True, seed=1, num_epochs=2))",
]


def _states(make: str, steps: int) -> str:
    """A case saving the state after ``steps`` elements of ``make`` and reading on to the end.

    ``make`` is an expression building the dataset or loader; the test restores the recorded
    Grain state into a fresh grain_core iterator of ``make()`` and compares what follows.
    """
    return (
        f"def make():\n    return {make}\n"
        f"it = iter(make())\nfor _ in range({steps}):\n    next(it)\n"
        "state = it.get_state()\n"
        "state = json.loads(state) if isinstance(state, bytes) else state\n"
        "result = {'state': state, 'rest': list(it)}"
    )


def _dl(n: int, sampler: str, ops: str = "[]", workers: int = 0) -> str:
    return (
        f"grain.DataLoader(data_source={_SRC.format(n=n)}, sampler={sampler}, "
        f"operations={ops}, worker_count={workers})"
    )


LOADER_STATES = [
    _states(_dl(8, "grain.samplers.IndexSampler(8, num_epochs=1)", "[grain.transforms.Batch(4)]", 2), 1),
    _states(_dl(8, "grain.samplers.IndexSampler(8, num_epochs=1)", "[]", 0), 3),
    _states(_dl(10, "grain.samplers.IndexSampler(10, num_epochs=2, shuffle=True, seed=3)", "[]", 0), 13),
    _states(_dl(10, "grain.samplers.IndexSampler(10, num_epochs=2, shuffle=True, seed=3)", "[grain.transforms.Batch(3)]", 0), 2),
    _states(_dl(10, "grain.samplers.IndexSampler(10, num_epochs=2, shuffle=True, seed=3)", "[grain.transforms.Batch(3)]", 2), 3),
    _states(_dl(12, "grain.samplers.IndexSampler(12, num_epochs=1)", "[]", 3), 5),
    _states(_dl(12, "grain.samplers.IndexSampler(12, grain.sharding.ShardOptions(1, 2), num_epochs=2, shuffle=True, seed=4)", "[grain.transforms.Batch(2)]", 0), 3),
]

_R = "grain.MapDataset.range"
DATASET_STATES = [
    _states(f"{_R}(10).map(lambda x: x + 1).to_iter_dataset()", 3),
    _states(f"{_R}(10).to_iter_dataset().map(lambda x: x * 2)", 4),
    _states(f"{_R}(10).to_iter_dataset().batch(2)", 2),
    _states(f"{_R}(11).batch(2).to_iter_dataset()", 2),
    _states(f"{_R}(10).to_iter_dataset().filter(lambda x: x % 3)", 2),
    _states(f"{_R}(10).to_iter_dataset().random_map(lambda x, rng: (x, int(rng.integers(1000))), seed=1)", 3),
    _states(f"{_R}(10).seed(5).shuffle().repeat(2).to_iter_dataset()", 13),
    _states(f"{_R}(30).seed(5).shuffle().map(lambda x: x).to_iter_dataset().batch(4)", 3),
    _states(f"grain.IterDataset.mix([{_R}(5).to_iter_dataset(), {_R}(10, 20).to_iter_dataset()], [1, 2])", 4),
]

_EX = "[{'tokens': np.arange(1, 1 + n) + 10 * i, 'index': np.int64(i)} for i, n in enumerate([3, 4, 2, 5, 1, 3])]"
_TOK = "[{'tokens': np.arange(1, 1 + n) + 10 * i} for i, n in enumerate([3, 4, 2, 5, 1, 3])]"
_SRC_IT = "grain.MapDataset.source({ex}).to_iter_dataset()"
PACKING = [
    f"result = grain.experimental.ConcatThenSplitIterDataset({_SRC_IT.format(ex=_TOK)}, length_struct={{'tokens': 5}})",
    f"result = grain.experimental.ConcatThenSplitIterDataset({_SRC_IT.format(ex=_TOK)}, length_struct={{'tokens': 5}}, "
    "bos_handling=grain.experimental.BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS, bos_token_id=99)",
    f"result = grain.experimental.ConcatThenSplitIterDataset({_SRC_IT.format(ex=_TOK)}, length_struct={{'tokens': 5}}, "
    "bos_handling=grain.experimental.BOSHandling.REPLACE_FIRST_TOKEN_WITH_BOS, bos_token_id=99, bos_features=['tokens'])",
    f"result = grain.experimental.ConcatThenSplitIterDataset({_SRC_IT.format(ex=_EX)}, length_struct={{'tokens': 5, 'index': 1}}, meta_features=['index'])",
    f"result = grain.experimental.ConcatThenSplitIterDataset({_SRC_IT.format(ex=_TOK)}, length_struct={{'tokens': 4}}, split_full_length_features=False)",
    f"result = grain.experimental.FirstFitPackIterDataset({_SRC_IT.format(ex=_TOK)}, length_struct={{'tokens': 6}}, num_packing_bins=2, shuffle_bins=False)",
    f"result = grain.experimental.FirstFitPackIterDataset({_SRC_IT.format(ex=_TOK)}, length_struct={{'tokens': 6}}, num_packing_bins=3, seed=4)",
    f"result = grain.experimental.FirstFitPackIterDataset({_SRC_IT.format(ex=_TOK)}, length_struct={{'tokens': 6}}, num_packing_bins=3, seed=0, shuffle_bins=True)",
    f"result = grain.experimental.BestFitPackIterDataset({_SRC_IT.format(ex=_TOK)}, length_struct={{'tokens': 6}}, num_packing_bins=3, shuffle_bins=False)",
    f"result = grain.experimental.FirstFitPackIterDataset({_SRC_IT.format(ex=_TOK)}, length_struct={{'tokens': 4}}, num_packing_bins=2)",
    f"result = grain.experimental.FirstFitPackIterDataset({_SRC_IT.format(ex=_EX)}, length_struct={{'tokens': 6, 'index': 2}}, num_packing_bins=2, shuffle_bins=False)",
]

# Many rounds: lengths drawn from a fixed list, so later rounds' bin orders (seeded with the rows
# yielded so far) are compared; the state cases save mid-round and at a round's end and restore.
_LENS = "[3, 1, 4, 1, 5, 2, 6, 5, 3, 5, 1, 2, 4, 6, 2, 3, 1, 1, 6, 4, 2, 2, 5, 3, 1]"
_ROUNDS_SRC = (
    "grain.MapDataset.source([{'t': np.arange(1, 1 + n) + 10 * i, 'g': np.full(n, i % 3 + 1)} "
    f"for i, n in enumerate({_LENS})]).to_iter_dataset()"
)


def _pack(cls: str, args: str) -> str:
    return f"grain.experimental.{cls}({_ROUNDS_SRC}, {args})"


def _pack_restore(make: str, steps: int) -> str:
    """Saves the state after ``steps`` rows, restores it into a fresh iterator, reads to the end."""
    return (
        f"def make():\n    return {make}\n"
        f"it = iter(make())\nhead = [next(it) for _ in range({steps})]\n"
        "it2 = iter(make())\nit2.set_state(it.get_state())\n"
        "result = {'head': head, 'rest': list(it2), 'same': [r['t'].tolist() for r in it]}"
    )


def _ls(n: int, *features: str) -> str:
    return "length_struct={" + ", ".join(f"'{f}': {n}" for f in features) + "}"


PACKING_ROUNDS = [
    "result = [r['t'] for r in " + _pack(cls, _ls(n, "t") + f", num_packing_bins={b}, seed={s}") + "]"
    for cls in ("FirstFitPackIterDataset", "BestFitPackIterDataset")
    for n, b in ((6, 2), (7, 3), (8, 4))
    for s in (0, 1, 7, 123456)
] + [
    f"result = {_pack('FirstFitPackIterDataset', _ls(6, 't', 'g') + ', num_packing_bins=3, seed=2')}",
    "result = " + _pack(
        "FirstFitPackIterDataset",
        _ls(7, "t", "g") + ", num_packing_bins=4, seed=5, shuffle_bins_group_by_feature='g'",
    ),
    "result = " + _pack(
        "BestFitPackIterDataset", _ls(8, "t") + ", num_packing_bins=3, seed=3, max_sequences_per_bin=2"
    ),
    f"result = [r['t'] for r in {_pack('FirstFitPackIterDataset', _ls(6, 't') + ', num_packing_bins=3')}]",
    "result = [r['t'] for r in grain.experimental.FirstFitPackIterDataset("
    "grain.MapDataset.source([{'t': np.full(3, i + 1)} for i in range(30)]).to_iter_dataset(), "
    "length_struct={'t': 4}, num_packing_bins=3, seed=0)]",
] + [
    _pack_restore(_pack("FirstFitPackIterDataset", _ls(7, "t") + f", num_packing_bins=3, seed={s}"), k)
    for s, k in ((0, 1), (0, 3), (9, 5), (9, 8))
] + [
    _pack_restore(_pack("BestFitPackIterDataset", _ls(8, "t") + ", num_packing_bins=4, seed=11"), 6),
]

# random_map under mp_prefetch: worker w of K numbers the elements it maps w, w + K, ... (Grain's
# mp_context); filter and batch before random_map make a worker's count differ from the position.
_RM = "lambda x, rng: (x, int(rng.integers(0, 10**6)))"
_MP = ".mp_prefetch(grain.MultiprocessingOptions(num_workers={w}))"
RANDOM_MAP_WORKERS = [
    f"result = grain.MapDataset.range({n}).to_iter_dataset(){pre}.random_map({_RM}, seed={s})"
    + (_MP.format(w=w) if w else "")
    for n, pre, s in (
        (9, "", 3),
        (20, ".filter(lambda x: x % 3)", 0),
        (13, ".batch(2).map(lambda b: b.tolist())", 7),
    )
    for w in (0, 1, 2, 3)
] + [
    f"result = grain.MapDataset.range(12).seed(5).to_iter_dataset().random_map({_RM})"
    + _MP.format(w=2),
    f"result = grain.MapDataset.range(10).to_iter_dataset().random_map({_RM}, seed=1)"
    f".random_map({_RM}, seed=2)" + _MP.format(w=3),
]

# Custom legacy Operations in DataLoader(operations=[...]): callables over an iterator of Records.
_OPS_PRELUDE = (
    "import importlib\n"
    "gp = importlib.import_module(grain.__name__ + '.python')\n"
    "class PairSum:\n"
    "    def __call__(self, input_iterator):\n"
    "        prev = None\n"
    "        for r in input_iterator:\n"
    "            if prev is None:\n"
    "                prev = r\n"
    "            else:\n"
    "                yield gp.Record(r.metadata.remove_record_key(), prev.data + r.data)\n"
    "                prev = None\n"
    "class Meta:\n"
    "    def __call__(self, input_iterator):\n"
    "        for r in input_iterator:\n"
    "            rng = None if r.metadata.rng is None else int(r.metadata.rng.integers(1000))\n"
    "            yield gp.Record(r.metadata, (r.metadata.index, r.metadata.record_key, rng, np.asarray(r.data).tolist()))\n"
    "class Twice(gp.MapTransform):\n"
    "    def map(self, x):\n"
    "        return x * 2\n"
    "class Odd(gp.FilterTransform):\n"
    "    def filter(self, x):\n"
    "        return x % 2 == 1\n"
    "class Dup:\n"
    "    def __call__(self, input_iterator):\n"
    "        for r in input_iterator:\n"
    "            if r.data % 3:\n"
    "                yield r\n"
    "                yield gp.Record(r.metadata.remove_record_key(), -r.data)\n"
)


def _ops_loader(n: int, sampler: str, ops: str, workers: int = 0) -> str:
    return (
        _OPS_PRELUDE
        + f"result = list(gp.DataLoader(data_source=list(range({n})), sampler={sampler}, "
        f"operations={ops}, worker_count={workers}))"
    )


_SEQ = "gp.IndexSampler({n}, gp.NoSharding(), shuffle=False, num_epochs=1)"
_SHUF = "gp.IndexSampler({n}, gp.NoSharding(), shuffle=True, num_epochs=2, seed=4)"
LEGACY_OPERATIONS = [
    _ops_loader(10, _SEQ.format(n=10), "[PairSum()]"),
    _ops_loader(11, _SEQ.format(n=11), "[Twice(), PairSum(), gp.Batch(2)]"),
    _ops_loader(8, _SHUF.format(n=8), "[Meta()]"),
    _ops_loader(8, _SHUF.format(n=8), "[Twice(), Meta()]"),
    _ops_loader(12, _SEQ.format(n=12), "[gp.Batch(3), Meta()]"),
    _ops_loader(12, _SEQ.format(n=12), "[Odd(), PairSum()]"),
    _ops_loader(9, _SEQ.format(n=9), "[Dup(), gp.Batch(2)]"),
    _ops_loader(9, _SEQ.format(n=9), "[gp.MapOperation(lambda x: x + 1), gp.FilterOperation(lambda x: x % 2), PairSum()]"),
    _ops_loader(10, "gp.IndexSampler(10, gp.ShardOptions(1, 2), shuffle=True, num_epochs=1, seed=3)", "[Meta()]"),
    _ops_loader(12, _SEQ.format(n=12), "[PairSum()]", workers=2),
    _ops_loader(12, _SEQ.format(n=12), "[Meta(), gp.Batch(2)]", workers=2),
    _ops_loader(14, _SEQ.format(n=14), "[Twice(), PairSum(), gp.Batch(2)]", workers=3),
]

_PQ = (
    "import os, tempfile\nimport pyarrow as pa, pyarrow.parquet as pq\n"
    "d = tempfile.mkdtemp()\npaths = []\n"
    "for i in range({files}):\n"
    "    p = os.path.join(d, f'{{i}}.parquet')\n"
    "    pq.write_table(pa.table({{'x': list(range(i * 100, i * 100 + 3 + i))}}), p, row_group_size=2)\n"
    "    paths.append(p)\n"
)
PARQUET = [
    _PQ.format(files=1) + "result = [r['x'] for r in grain.experimental.ParquetIterDataset(paths)]",
    _PQ.format(files=3) + "result = [r['x'] for r in grain.experimental.ParquetIterDataset(paths)]",
    _PQ.format(files=20) + "result = [r['x'] for r in grain.experimental.ParquetIterDataset(paths)]",
]

GROUPS = {
    "shuffle": SHUFFLE,
    "seeds": SEEDS,
    "window_shuffle": WINDOW,
    "mix": MIX,
    "interleave": INTERLEAVE,
    "data_loader": LOADER,
    "data_loader_states": LOADER_STATES,
    "dataset_states": DATASET_STATES,
    "packing": PACKING,
    "packing_rounds": PACKING_ROUNDS,
    "random_map_workers": RANDOM_MAP_WORKERS,
    "legacy_operations": LEGACY_OPERATIONS,
    "parquet": PARQUET,
}
