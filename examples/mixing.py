"""Mixing datasets by weight: ``MapDataset.mix`` (random access, deterministic proportions) and
``IterDataset.mix`` (streams), with a checkpoint round trip.

    python examples/mixing.py [--small]
"""

from __future__ import annotations

import argparse
import collections

import grain_core as grain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    n = 1_000 if args.small else 100_000

    web = grain.MapDataset.range(n).map(lambda i: ("web", i))
    code = grain.MapDataset.range(n // 2).map(lambda i: ("code", i))
    books = grain.MapDataset.range(n // 4).map(lambda i: ("books", i))
    mixed = grain.MapDataset.mix([web, code, books], weights=[0.6, 0.3, 0.1]).seed(1).shuffle()
    counts = collections.Counter(src for src, _ in (mixed[i] for i in range(min(len(mixed), 1000))))
    print("MapDataset.mix, first 1000 elements:", dict(counts))

    streams = {
        "web": web.to_iter_dataset(),
        "code": code.to_iter_dataset(),
        "books": books.repeat().to_iter_dataset(),
    }
    ds = grain.IterDataset.mix(streams, {"web": 0.6, "code": 0.3, "books": 0.1}).batch(10)
    it = iter(ds)
    for _ in range(5):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(5)]
    it2 = iter(ds)
    it2.set_state(state)
    from grain_core.testing.compare import assert_elements_equal

    assert_elements_equal(expected, [next(it2) for _ in range(5)], "IterDataset.mix after restore")
    print("IterDataset.mix: resumed from a checkpoint identically")


if __name__ == "__main__":
    main()
