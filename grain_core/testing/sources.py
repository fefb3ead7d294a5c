"""Conformance checks for random-access data sources."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle
import numpy as np

from grain_core.testing.compare import assert_elements_equal, elements_equal


def check_source(source: Any, *, sample: int = 64, seed: int = 0, mp_workers: int = 0) -> None:
    """Asserts the ``RandomAccessDataSource`` contract on ``source``.

    Checks: ``len`` is a non-negative int; ``source[i]`` works for sampled ``i`` and is
    deterministic; ``__getitems__`` (if defined) equals single reads in the order asked, including
    repeated and unsorted indices; an index ``>= len`` raises ``IndexError``; the source survives a
    pickle (and cloudpickle) round trip with the same records; ``MapDataset.source(source)`` reads
    the same records, also through threads, and through ``mp_prefetch`` with ``mp_workers`` workers
    when ``mp_workers > 0``.
    """
    import grain_core as grain

    n = len(source)
    assert isinstance(n, int) and n >= 0, f"len(source) must be a non-negative int, got {n!r}"
    if n == 0:
        try:
            source[0]
        except IndexError:
            return
        raise AssertionError("source[0] of an empty source (len 0) must raise IndexError")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=min(sample, n)).tolist() + [0, n - 1]
    single = [source[i] for i in idx]
    again = [source[i] for i in idx]
    assert_elements_equal(single, again, "reading the same indices twice")
    bulk = getattr(source, "__getitems__", None)
    if bulk is not None:
        assert_elements_equal(single, list(bulk(idx)), "__getitems__ versus single reads")
        rev = list(reversed(idx))
        assert_elements_equal([source[i] for i in rev], list(bulk(rev)), "__getitems__ (reversed)")
    try:
        source[n]
    except IndexError:
        pass
    else:
        raise AssertionError(f"source[{n}] (== len) must raise IndexError")
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, pickle.loads)):
        try:
            clone = loads(dumps(source))
        except Exception as e:
            raise AssertionError(
                f"the source must survive a {dumps.__module__} round trip (mp_prefetch workers "
                f"receive it pickled), but it failed: {type(e).__name__}: {e}"
            ) from e
        assert len(clone) == n, "len changed after pickling"
        assert_elements_equal(single, [clone[i] for i in idx], "records after a pickle round trip")
    ds = grain.MapDataset.source(source)
    assert all(elements_equal(ds[i], x) for i, x in zip(idx, single)), "MapDataset.source differs"
    count = min(n, 200)
    expected = [source[i] for i in range(count)]
    threaded = ds[:count].to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=16))
    assert_elements_equal(expected, list(threaded), "to_iter_dataset with 4 threads")
    if mp_workers:
        mp = ds[:count].to_iter_dataset().mp_prefetch(
            grain.MultiprocessingOptions(num_workers=mp_workers)
        )
        it = iter(mp)
        try:
            assert_elements_equal(expected, list(it), f"mp_prefetch with {mp_workers} workers")
        finally:
            it.close()
