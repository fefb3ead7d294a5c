"""Where the window-shuffle row's time goes: the row as shipped (orders computed by the plugin's
C accelerator where it is built), the same row with the orders computed by numpy, and the row
with every window's order taken from a table filled by an untimed pass (the ceiling for any faster
way of computing the same orders), each as a share of the plain-Python floor timed in the same
round (a diagnostic, not part of ``run.py``'s bench). It prints each round's shares and their
medians, so a loaded machine shows as spread rather than as a slower figure. Usage::

    python benchmarks/ab_window_orders.py [--rounds 5] [--default-options]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_chunks  # noqa: E402
from grain_plugin_window_shuffle import window_orders, window_shuffle  # noqa: E402
from harness import _timed_reference, measure  # noqa: E402

import grain_core  # noqa: E402


def _rate(zero: bool) -> float:
    return measure(lambda: bench_chunks._window_shuffle(grain_core, zero), lambda _: 1, 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--default-options", action="store_true", help="default ReadOptions")
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
        "numpy orders": [],
        "orders precomputed": [],
    }
    native = window_orders.NATIVE
    print(f"C accelerator built: {native}")
    try:
        for r in range(args.rounds):
            base = _timed_reference(floor, ())
            it_class._order = shipped
            shares["as shipped"].append(_rate(zero) / base)
            window_orders.NATIVE = False
            try:
                shares["numpy orders"].append(_rate(zero) / base)
            finally:
                window_orders.NATIVE = native
            it_class._order = precomputed
            shares["orders precomputed"].append(_rate(zero) / base)
            print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.0%}" for k, v in shares.items()))
    finally:
        it_class._order = shipped
    tag = "default options" if args.default_options else "threads=0 buffer=0"
    for k, v in shares.items():
        print(f"{tag}: {k}: median {statistics.median(v):.0%} of the floor")


if __name__ == "__main__":
    main()
