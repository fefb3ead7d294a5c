"""Where the window-shuffle row's time goes: the row as shipped against the same row with Grain's
window orders computed before timing, each as a share of the plain-Python floor timed in the same
round (a diagnostic, not part of ``run.py``'s bench).

Each round times, alternating: the floor, the row as shipped, the row with every window's order
taken from a table filled by an untimed pass (the ceiling for any faster way of computing the
same orders), and the row with the next 32 windows' orders computed on one background thread
while the current ones are served (a prototype of the design ``docs/transforms.md`` explains is
not used). With ``--native`` it also times the row with the orders computed by
``benchmarks/native/window_order.c`` (compiled here with ``$CC``, default ``cc``, and loaded with
ctypes; grain_core neither builds nor ships it): the same orders, checked against numpy's first.
It prints each round's shares and their medians, so a loaded machine shows as spread rather than
as a slower figure. Usage::

    python benchmarks/ab_window_orders.py [--rounds 5] [--default-options] [--native]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_chunks  # noqa: E402
import numpy as np  # noqa: E402
from grain_plugin_window_shuffle import window_shuffle  # noqa: E402
from harness import _timed_reference, measure  # noqa: E402

import grain_core  # noqa: E402
import grain_core.shuffle_cipher as cipher  # noqa: E402
from grain_core.author import shuffle_tables  # noqa: E402

#: Windows per background computation, and the longest wait for one (it takes milliseconds).
_BATCH = 32
_WAIT_S = 60.0


def _rate(zero: bool) -> float:
    return measure(lambda: bench_chunks._window_shuffle(grain_core, zero), lambda _: 1, 30)


def _tables(it, first: int, length: int):
    seeds = [(it._seed + first + j) % 2**32 for j in range(_BATCH)]
    return shuffle_tables(length - 1, seeds, grain_exact=it._grain_exact)


def _threaded(pool: ThreadPoolExecutor, shipped):
    """An ``_order`` serving full windows from batches of ``_BATCH`` orders, the next batch
    computed on ``pool`` while this one is served (the same orders as ``shipped``)."""

    def order(self, k, length):
        if length != self._size:
            return shipped(self, k, length)
        st = self.__dict__.setdefault("_ab_threaded", {"tables": None, "first": 0, "next": None})
        if st["tables"] is None or not 0 <= k - st["first"] < _BATCH:
            nxt = st["next"]
            if nxt is not None and nxt[0] == k:
                st["tables"] = nxt[1].result(timeout=_WAIT_S)
            else:
                st["tables"] = _tables(self, k, length)
            st["first"] = k
            st["next"] = (k + _BATCH, pool.submit(_tables, self, k + _BATCH, length))
        return st["tables"][k - st["first"], ::-1]

    return order


def _native_walk():
    """``cipher._walk_tables`` computed by ``native/window_order.c``, compiled into a temporary
    folder that is removed as soon as the library is loaded (nothing is left if the run is killed)."""
    source = Path(__file__).resolve().parent / "native" / "window_order.c"
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory(prefix="ab-window-orders-") as tmp:
        lib_path = os.path.join(tmp, "window_order.so")
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", lib_path, str(source)], check=True, timeout=120)
        lib = ctypes.CDLL(lib_path)
    lib.window_order.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.window_order.restype = None
    work = np.empty(4 << 16, np.uint8)

    def walk(max_index, seeds, rounds):
        out = np.empty((len(seeds), max_index + 1), np.int64)
        for row, seed in zip(out, seeds):
            keys = bytes(k & 0xFF for k in cipher._seed_seq_words(seed, rounds))
            lib.window_order(keys, rounds, max_index + 1, row.ctypes.data, work.ctypes.data)
        return out

    seeds = list(range(8))
    if not np.array_equal(walk(999, seeds, 4), cipher._walk_tables(999, seeds, 4)):
        raise AssertionError("native/window_order.c computes other orders than numpy")
    return walk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--default-options", action="store_true", help="default ReadOptions")
    parser.add_argument("--native", action="store_true", help="also time native/window_order.c")
    args = parser.parse_args()
    zero = not args.default_options
    floor = bench_chunks._floor(bench_chunks._floor_window_shuffle)["python floor"]
    it_class = window_shuffle._WindowShuffleIterator
    shipped = it_class._order
    orders: dict[tuple[int, int], object] = {}

    def precomputed(self, k, length):
        return orders[(k, length)]

    def recording(self, k, length):
        orders[(k, length)] = order = shipped(self, k, length).copy()
        return order

    it_class._order = recording
    _rate(zero)  # untimed: fills the table of orders
    shares: dict[str, list[float]] = {
        "as shipped": [],
        "orders precomputed": [],
        "orders on a background thread": [],
    }
    pool = ThreadPoolExecutor(1, thread_name_prefix="ab-window-orders")
    threaded = _threaded(pool, shipped)
    numpy_walk = cipher._walk_tables
    try:
        native_walk = _native_walk() if args.native else None
    except BaseException:
        pool.shutdown()
        raise
    if native_walk is not None:
        shares["orders computed natively"] = []
    try:
        for r in range(args.rounds):
            base = _timed_reference(floor, ())
            it_class._order = shipped
            shares["as shipped"].append(_rate(zero) / base)
            it_class._order = precomputed
            shares["orders precomputed"].append(_rate(zero) / base)
            it_class._order = threaded
            shares["orders on a background thread"].append(_rate(zero) / base)
            if native_walk is not None:
                it_class._order = shipped
                cipher._walk_tables = native_walk
                try:
                    shares["orders computed natively"].append(_rate(zero) / base)
                finally:
                    cipher._walk_tables = numpy_walk
            print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.0%}" for k, v in shares.items()))
    finally:
        it_class._order = shipped
        pool.shutdown(wait=True)  # a batch still computing ends within milliseconds
    tag = "default options" if args.default_options else "threads=0 buffer=0"
    for k, v in shares.items():
        print(f"{tag}: {k}: median {statistics.median(v):.0%} of the floor")


if __name__ == "__main__":
    main()
