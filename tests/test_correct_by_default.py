"""Correct by default, Grain-exact on request (``grain_core.config.grain_exact``).

By default every epoch is exactly what its stages promise: a shuffle is a permutation, and no
window shuffle, shard or slice repeats or drops a record. Under the switch a pipeline gives
google grain 0.2.18's output bit for bit, its bugs included (recorded by
``tests/correct_by_default/record_grain.py`` into ``grain_outputs.json``). Where Grain is already
correct, both modes give Grain's order.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import pathlib
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grain_core as grain
from grain_core import shuffle_cipher
from grain_core.global_config import Config, DataModeError

HERE = pathlib.Path(__file__).resolve().parent / "correct_by_default"
_spec = importlib.util.spec_from_file_location("_cbd_cases", HERE / "cases.py")
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)
RECORDED = json.loads((HERE / "grain_outputs.json").read_text())
assert RECORDED["recorded_from"].startswith("google grain 0.2.18")

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
#: The recorded cases the kernel runs alone; the window-shuffle ones need that plugin and run in
#: tests/integration/test_correct_by_default_window.py (the integration session has every plugin).
KERNEL_CASES = sorted(n for n in cases.CASES if not n.startswith("window-"))


def _exact(on: bool):
    return grain.config.override(grain_exact=on)


# --- the recorded Grain cases, in both modes ---------------------------------------------------


@pytest.mark.parametrize("name", KERNEL_CASES)
def test_grain_exact_mode_gives_grains_recorded_output(name):
    with _exact(True):
        ours = cases.CASES[name](grain)
    assert ours == RECORDED["cases"][name], name


@pytest.mark.parametrize("name", KERNEL_CASES)
def test_correct_mode_keeps_every_record_exactly_once(name):
    assert grain.config.grain_exact is False  # the default
    ours = cases.CASES[name](grain)
    theirs = RECORDED["cases"][name]
    kind, *args = name.split("-")
    if kind == "shuffle":
        n = int(args[0])
        assert ours["len"] == ours["distinct"] == n
        if theirs["distinct"] == n:  # Grain is correct here: its order is kept
            assert ours == theirs
        else:
            assert n - 1 in (2**16, 2**18)
    elif kind == "shard":
        n, count, epochs = int(args[0]), int(args[1]), int(args[2])
        for k, got in enumerate(ours):
            start, end = grain.sharding.ShardOptions(k, count).bounds(n)
            assert len(got) == epochs * (end - start)
            for e in range(epochs):
                size = end - start
                assert sorted(got[e * size : (e + 1) * size]) == list(range(start, end))
        if n % count == 0:
            assert ours == theirs
        else:
            assert ours != theirs
    else:  # slice: each epoch reads the same elements (Grain issue 1200)
        found = re.fullmatch(r"slice-(\d+)-(\(.*\))-(\d+)", name)
        assert found is not None
        n = int(found[1])
        sl = slice(*ast.literal_eval(found[2]))
        size = len(range(n)[sl])
        epochs = len(ours) // size
        first = ours[:size]
        assert first == theirs[:size]
        if size == n:  # a whole slice: every epoch a new permutation, as in Grain
            assert ours == theirs
            for e in range(epochs):
                assert sorted(ours[e * size : (e + 1) * size]) == list(range(n))
        else:
            for e in range(1, epochs):
                assert ours[e * size : (e + 1) * size] == first
            assert ours != theirs


# --- properties, both modes ----------------------------------------------------------------------

_POW2_SIZES = sorted({max(1, 2**k + d) for k in range(0, 19) for d in (-1, 0, 1)})


@pytest.mark.parametrize("n", _POW2_SIZES)
def test_shuffle_of_sizes_around_powers_of_two_is_a_permutation(n):
    for seed in (0, 12345):
        out = shuffle_cipher.IndexPermutation(n, seed, grain_exact=False)(np.arange(n))
        assert np.array_equal(np.sort(out), np.arange(n))
        exact = shuffle_cipher.IndexPermutation(n, seed, grain_exact=True)(np.arange(n))
        if shuffle_cipher.grain_block_is_short(n - 1):  # Grain: the top index lands where index 0 does
            assert exact[-1] == exact[0] and np.unique(exact).size == n - 1
            assert (out != exact).any()
        else:
            assert np.array_equal(out, exact)


def test_index_shuffle_follows_the_mode():
    assert shuffle_cipher.index_shuffle(65536, 65536, 0) != shuffle_cipher.index_shuffle(0, 65536, 0)
    assert shuffle_cipher.index_shuffle(65536, 65536, 0, grain_exact=True) == shuffle_cipher.index_shuffle(0, 65536, 0, grain_exact=True)
    with _exact(True):
        assert grain.experimental.index_shuffle(65536, 65536, 0) == grain.experimental.index_shuffle(0, 65536, 0)
    top = 2**40
    assert {shuffle_cipher.index_shuffle(i, top, 3) for i in (0, top)} == {
        shuffle_cipher.index_shuffle(i, top, 3) for i in (0, top)
    }
    assert shuffle_cipher.index_shuffle(top, top, 3) != shuffle_cipher.index_shuffle(0, top, 3)
    assert shuffle_cipher.IndexShuffle(top, 3).inverse(shuffle_cipher.index_shuffle(top, top, 3)) == top


@SETTINGS
@given(
    n=st.integers(1, 60),
    count=st.integers(1, 7),
    epochs=st.integers(1, 3),
    shuffle=st.booleans(),
)
def test_uneven_shards_read_every_record_once_per_epoch(n, count, epochs, shuffle):
    seen = []
    for k in range(count):
        opts = grain.sharding.ShardOptions(k, count)
        sampler = grain.samplers.IndexSampler(n, opts, shuffle=shuffle, num_epochs=epochs, seed=1)
        start, end = opts.bounds(n)
        loader = grain.DataLoader(data_source=list(range(n)), sampler=sampler, worker_count=0)
        got = [int(x) for x in loader]
        size = end - start
        assert len(got) == epochs * size
        for e in range(epochs):
            assert sorted(got[e * size : (e + 1) * size]) == list(range(start, end))
        seen.extend(got[:size])
    assert sorted(seen) == list(range(n))


@pytest.mark.parametrize("n, count", [(10, 3), (7, 4), (23, 5), (3, 5)])
def test_sequential_and_unsharded_samplers_read_every_record_once(n, count):
    seq, strided = [], []
    for k in range(count):
        opts = grain.sharding.ShardOptions(k, count)
        seq += list(grain.DataLoader(
            data_source=list(range(n)), sampler=grain.samplers.SequentialSampler(n, opts), worker_count=0
        ))
        strided += list(grain.DataLoader(
            data_source=list(range(n)), sampler=grain.samplers.IndexSampler(n, num_epochs=1),
            shard_options=opts, worker_count=0,
        ))
    assert sorted(seq) == sorted(strided) == list(range(n))
    with _exact(True):  # Grain: len // shard_count positions per shard
        grains = [
            x
            for k in range(count)
            for x in grain.DataLoader(
                data_source=list(range(n)),
                sampler=grain.samplers.SequentialSampler(n, grain.sharding.ShardOptions(k, count)),
                worker_count=0,
            )
        ]
    assert len(grains) == n // count * count


def test_grain_exact_shards_leave_records_unread_as_grain_does():
    with _exact(True):
        got = [
            [int(x) for x in grain.DataLoader(
                data_source=list(range(10)),
                sampler=grain.samplers.IndexSampler(10, grain.sharding.ShardOptions(k, 3), num_epochs=1),
                worker_count=0,
            )]
            for k in range(3)
        ]
    assert got == [[0, 1, 2], [4, 5, 6], [7, 8, 9]]  # record 3 unread (recorded from Grain)


@SETTINGS
@given(
    n=st.integers(1, 40),
    start=st.integers(-45, 45) | st.none(),
    stop=st.integers(-45, 45) | st.none(),
    step=st.sampled_from([None, 1, 2, 3, -1, -2]),
    epochs=st.integers(2, 4),
)
def test_slice_then_repeat_reads_only_the_slice(n, start, stop, step, epochs):
    sl = slice(start, stop, step)
    base = grain.MapDataset.range(n).shuffle(seed=9)
    ds = base[sl]
    size = len(ds)
    if size == 0:
        return
    out = ds.repeat(epochs).__getitems__(list(range(size * epochs)))
    first = [base[i] for i in range(n)][sl]
    for e in range(epochs):
        if size < n:  # a part: the same elements every epoch
            assert out[e * size : (e + 1) * size] == first
        else:  # the whole dataset (maybe reversed): reshuffled every epoch, as in Grain
            assert sorted(out[e * size : (e + 1) * size]) == list(range(n))
    with _exact(True):
        exact = grain.MapDataset.range(n).shuffle(seed=9)[sl].repeat(epochs)
    grains = [exact[i] for i in range(size * epochs)]
    assert grains[:size] == first
    # Grain reads the parent's next epochs (its other elements come back when the slice is a part)
    assert grains[size:] == [
        base[(i // size) * n + range(n)[sl][i % size]] for i in range(size, size * epochs)
    ]


def test_slice_without_a_shuffle_upstream_keeps_grains_epochs():
    # A random_map below a slice still draws per epoch (Grain is correct there).
    ds = grain.MapDataset.range(10).random_map(lambda x, rng: (x, int(rng.integers(1 << 30))), seed=3)
    got = [ds[:4].repeat(2)[i] for i in range(8)]
    assert [x for x, _ in got] == [0, 1, 2, 3] * 2
    assert got[:4] != got[4:]


# --- the switch ------------------------------------------------------------------------------------


def test_the_switch_is_off_by_default_and_set_by_its_environment_variable():
    assert Config({}).grain_exact is False
    assert Config({"GRAIN_CORE_GRAIN_EXACT": "1"}).grain_exact is True
    assert Config({"GRAIN_GRAIN_EXACT": "true"}).grain_exact is True
    assert Config({"GRAIN_GRAIN_EXACT": "1", "GRAIN_CORE_GRAIN_EXACT": "0"}).grain_exact is False
    with pytest.raises(ValueError, match="GRAIN_CORE_GRAIN_EXACT='maybe' is not a boolean"):
        Config({"GRAIN_CORE_GRAIN_EXACT": "maybe"})
    with pytest.raises(TypeError, match="bool"):
        grain.config.update("grain_exact", 1)
    assert grain.config.grain_exact is False


def test_override_puts_the_option_back():
    cfg = Config({})
    with cfg.override(grain_exact=True):
        assert cfg.grain_exact is True
        cfg.default_grain_exact(False)  # explicitly set: an alias default does not change it
        assert cfg.grain_exact is True
    assert cfg.grain_exact is False
    cfg.default_grain_exact(True)  # not set by the user any more: the default applies
    assert cfg.grain_exact is True


def test_a_stage_keeps_the_mode_it_was_built_in():
    with _exact(True):
        exact = grain.MapDataset.range(65537).shuffle(seed=1)
    correct = grain.MapDataset.range(65537).shuffle(seed=1)
    idx = list(range(65537))
    assert len(set(exact.__getitems__(idx))) == 65536
    assert len(set(correct.__getitems__(idx))) == 65537
    again = pickle.loads(pickle.dumps(exact))  # e.g. in a worker process
    assert again.__getitems__(idx) == exact.__getitems__(idx)


def test_the_grain_alias_turns_the_switch_on_unless_set():
    code = (
        "import grain_core\n"
        "from grain_core.compat.alias import install_grain_alias, uninstall_grain_alias\n"
        "install_grain_alias(replace_installed=True)\n"
        "import grain\n"
        "print(grain.config.grain_exact, len(set(grain.MapDataset.range(65537).shuffle(seed=1))))\n"
        "uninstall_grain_alias()\n"
        "print(grain_core.config.grain_exact)\n"
    )
    env = {k: v for k, v in os.environ.items() if "GRAIN" not in k}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=True
    ).stdout.split()
    assert out == ["True", "65536", "False"]
    env["GRAIN_CORE_GRAIN_EXACT"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=True
    ).stdout.split()
    assert out == ["False", "65537", "False"]


# --- states record their mode -------------------------------------------------------------------


def _pipeline():
    return grain.MapDataset.range(10).shuffle(seed=42)[:4].repeat(3).to_iter_dataset()


def test_a_state_records_its_mode_and_is_refused_in_the_other():
    it = iter(_pipeline())
    next(it)
    correct_state = it.get_state()
    assert any('"data_mode":"correct"' in s for s in correct_state["stages"])
    with _exact(True):
        exact_it = iter(_pipeline())
    next(exact_it)
    exact_state = exact_it.get_state()
    assert not any("data_mode" in s for s in exact_state["stages"])
    before = exact_it.get_state()
    with pytest.raises(DataModeError, match=r"update\('grain_exact', False\)"):
        exact_it.set_state(correct_state)
    assert exact_it.get_state() == before
    with pytest.raises(DataModeError, match=r"update\('grain_exact', True\)"):
        it.set_state(exact_state)
    it.set_state(correct_state)
    assert list(it) == [6, 7, 9] + [8, 6, 7, 9] * 2


def test_a_grain_state_restores_in_grain_exact_mode_and_switches_correct_mode():
    # Built in correct mode: the iterator switches to Grain's data (tests/test_grain_state_switch.py)
    it = iter(_pipeline())
    it.set_state({"next_index": 5})
    assert list(it) == RECORDED["cases"]["slice-10-(0, 4, 1)-3"][5:]
    with _exact(False):  # opted out explicitly: refused
        it = iter(_pipeline())
        with pytest.raises(DataModeError, match="GRAIN_CORE_GRAIN_EXACT=1"):
            it.set_state({"next_index": 5})
    with _exact(True):
        exact_it = iter(_pipeline())
    exact_it.set_state({"next_index": 5})  # Grain's own data from there (recorded)
    assert list(exact_it) == RECORDED["cases"]["slice-10-(0, 4, 1)-3"][5:]


def test_a_pipeline_the_mode_does_not_change_restores_states_of_either_mode():
    def make():
        return grain.MapDataset.range(100).shuffle(seed=1).batch(7).to_iter_dataset()

    it = iter(make())
    next(it)
    state = it.get_state()
    with _exact(True):
        other = iter(make())
    other.set_state(state)
    other.set_state({"next_index": 3})  # a Grain state, in either mode
    it.set_state({"next_index": 3})
    assert [b.tolist() for b in it] == [b.tolist() for b in other]
