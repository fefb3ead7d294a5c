"""Correct by default, Grain-exact on request, for the window-shuffle plugin's stages (the rest
is tests/test_correct_by_default.py, which the kernel session runs without this plugin).

Recorded cases: ``tests/correct_by_default/record_grain.py`` (google grain 0.2.18) writes
``grain_outputs.json``; the ``window-*`` cases are checked here in both modes.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grain_core as grain

HERE = pathlib.Path(__file__).resolve().parents[1] / "correct_by_default"
_spec = importlib.util.spec_from_file_location("_cbd_cases", HERE / "cases.py")
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)
RECORDED = json.loads((HERE / "grain_outputs.json").read_text())
assert RECORDED["recorded_from"].startswith("google grain 0.2.18")

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
WINDOW_CASES = sorted(n for n in cases.CASES if n.startswith("window-"))


def _exact(on: bool):
    return grain.config.override(grain_exact=on)


def test_there_are_window_cases():
    assert len(WINDOW_CASES) >= 5


@pytest.mark.parametrize("name", WINDOW_CASES)
def test_grain_exact_mode_gives_grains_recorded_output(name):
    with _exact(True):
        ours = cases.CASES[name](grain)
    assert ours == RECORDED["cases"][name], name


@pytest.mark.parametrize("name", WINDOW_CASES)
def test_correct_mode_keeps_every_record_exactly_once(name):
    assert grain.config.grain_exact is False  # the default
    ours = cases.CASES[name](grain)
    theirs = RECORDED["cases"][name]
    _, n, w = name.split("-")
    n, w = int(n), int(w)
    for e in range(2):
        assert sorted(ours[e * n : (e + 1) * n]) == list(range(n))
    for start in range(0, n, w):  # windows stay windows
        assert sorted(ours[start : min(n, start + w)]) == list(range(start, min(n, start + w)))
    if n % w == 0:
        assert ours == theirs
    else:
        assert ours[: n - n % w] == theirs[: n - n % w]  # only the partial window differs
        assert ours != theirs


@SETTINGS
@given(n=st.integers(1, 300), w=st.integers(1, 70), seed=st.integers(0, 2**32 - 1))
def test_window_shuffle_epochs_are_permutations(n, w, seed):
    ws = grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(n), window_size=w, seed=seed)
    out = ws.repeat(3).__getitems__(list(range(3 * n)))
    for e in range(3):
        assert sorted(out[e * n : (e + 1) * n]) == list(range(n))
    with _exact(True):
        exact = grain.experimental.WindowShuffleMapDataset(
            grain.MapDataset.range(n), window_size=w, seed=seed
        )
    grains = [exact[i] for i in range(n)]
    if n % w == 0:
        assert grains == out[:n]
    else:  # Grain's partial last window is shuffled as a full one: whole windows agree
        assert grains[: n - n % w] == out[: n - n % w]


def test_window_shuffle_iter_dataset_of_a_2_16_plus_1_window():
    def run():
        ds = grain.experimental.WindowShuffleIterDataset(
            grain.MapDataset.range(65537).to_iter_dataset(), window_size=65537, seed=4
        )
        return list(ds)

    assert sorted(run()) == list(range(65537))
    with _exact(True):
        exact = run()
    assert len(set(exact)) == 65536  # Grain's index shuffle repeats one position of the window
