"""Inputs shared by the packing tests: token documents and their source."""

import numpy as np

import grain_core as grain


def _docs(n=60, seed=0, hi=12):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a = int(rng.integers(1, hi))
        b = int(rng.integers(1, hi))
        out.append(
            {
                "inputs": np.arange(a) + 100 * i,
                "targets": np.arange(b) + 100 * i,
                "id": np.array([i]),
            }
        )
    return out


def _src(docs):
    return grain.MapDataset.source(docs).to_iter_dataset()


def _cts(docs, **kw):
    return grain.experimental.ConcatThenSplitIterDataset(_src(docs), **kw)
