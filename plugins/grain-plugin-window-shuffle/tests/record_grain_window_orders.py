"""Records, from google grain 0.2.18, the order ``WindowShuffleIterDataset`` gives large windows,
into ``data/grain_window_orders.json`` (read by ``test_window_shuffle_large.py``). Run it with a
Python that has google's ``grain``: ``/path/to/grain-venv/bin/python record_grain_window_orders.py``
(``--check`` compares with the committed file instead of writing it)."""

from __future__ import annotations

import json
import pathlib
import sys

import grain

OUT = pathlib.Path(__file__).parent / "data" / "grain_window_orders.json"
NOTE = (
    "Recorded from google grain 0.2.18 (WindowShuffleIterDataset over "
    "MapDataset.range(n).to_iter_dataset()); see test_window_shuffle_large.py."
)
# (n, window_size, seed): windows of 300 to 16,384 elements, each with a last, partial window.
CASES = [(2600, 1000, 5), (1000, 300, 77), (17000, 16384, 3)]


def record() -> str:
    cases = []
    for n, window_size, seed in CASES:
        ds = grain.experimental.WindowShuffleIterDataset(
            grain.MapDataset.range(n).to_iter_dataset(), window_size=window_size, seed=seed
        )
        elements = [int(x) for x in ds]
        assert sorted(elements) == list(range(n)), (n, window_size, seed)
        cases.append({"n": n, "window_size": window_size, "seed": seed, "elements": elements})
    return json.dumps({"note": NOTE, "cases": cases})


def main() -> None:
    text = record()
    if "--check" in sys.argv[1:]:
        if OUT.read_text() != text:
            raise SystemExit(f"{OUT} differs from what google grain gives now.")
        print(f"{OUT.name}: identical")
        return
    OUT.write_text(text)


if __name__ == "__main__":
    main()
