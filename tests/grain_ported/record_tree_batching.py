"""Recorder (needs google grain 0.2.18, e.g. /tmp/grain_ref): how Grain batches pytrees.

Run ``python record_tree_batching.py grain`` (with jax) and ``... grain nojax`` (jax blocked) in
Grain's venv, and ``... ours [nojax]`` here; tests/test_tree_registry.py holds the recorded answers.
"""

import collections
import dataclasses
import sys
import typing

import numpy as np

if len(sys.argv) > 2 and sys.argv[2] == "nojax":
    sys.modules["jax"] = None
if sys.argv[1] == "grain":
    import grain
else:
    import grain_core as grain
try:
    import jax

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class P:
        x: np.ndarray
        y: int
except ImportError:

    @dataclasses.dataclass
    class P:
        x: np.ndarray
        y: int


class NT(typing.NamedTuple):
    a: int
    b: np.ndarray


cases = {
    "dc": [P(np.arange(2), i) for i in range(3)],
    "nt": [NT(i, np.ones(2)) for i in range(3)],
    "none": [{"a": i, "b": None} for i in range(3)],
    "order": [{"b": i, "a": i} for i in range(3)],
    "odict": [collections.OrderedDict(b=i, a=i) for i in range(3)],
    "ragged": [{"a": np.ones(i + 1)} for i in range(3)],
    "keys": [{"a": 1}, {"b": 2}],
    "len": [[1, 2], [3]],
}
for name, els in cases.items():
    for kind in ("map", "iter"):
        ds = grain.MapDataset.source(els)
        if kind == "iter":
            ds = ds.to_iter_dataset()
        try:
            out = list(ds.batch(len(els)))[0]
            print(name, kind, type(out).__name__, repr(out).replace("\n", " ")[:150])
        except Exception as e:
            print(name, kind, "ERR", type(e).__name__, str(e).replace("\n", " | ")[:300])
