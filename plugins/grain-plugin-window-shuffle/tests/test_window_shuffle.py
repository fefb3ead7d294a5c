import json

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing
from grain_core.state import StateMismatchError


def _windows_ok(out, n, w):
    assert sorted(out) == list(range(n))
    for k in range(0, n, w):
        assert sorted(out[k : k + w]) == list(range(k, min(k + w, n)))


def test_map_grain_windows_read_past_a_partial_last_window():
    # Grain's order (recorded in tests/compat_semantics), under the Grain-exact switch: the partial
    # last window is shuffled as a full one, so it reads indices of the next epoch.
    with grain.config.override(grain_exact=True):
        ds = grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(20), window_size=6, seed=3)
    assert list(ds) == [4, 3, 0, 1, 2, 5, 11, 6, 10, 9, 8, 7, 16, 12, 17, 15, 13, 14, 0, 3]
    assert ds.__getitems__(list(range(20))) == list(ds)
    explicit = grain.experimental.WindowShuffleMapDataset(
        grain.MapDataset.range(20), window_size=6, seed=3, clip_last_window=False
    )
    assert list(explicit) == list(ds)
    # By default the last window is permuted within itself: the whole windows are Grain's.
    correct = grain.experimental.WindowShuffleMapDataset(grain.MapDataset.range(20), window_size=6, seed=3)
    assert list(correct)[:18] == list(ds)[:18]
    assert sorted(list(correct)[18:]) == [18, 19]


def test_map_permutes_within_windows_and_epochs():
    ds = grain.MapDataset.source(range(1000)).pipe(
        grain.experimental.WindowShuffleMapDataset, window_size=128, seed=0, clip_last_window=True
    )
    out = list(ds)
    _windows_ok(out, 1000, 128)
    assert out != list(range(1000))
    epoch1 = [ds[i] for i in range(1000, 2000)]
    _windows_ok(epoch1, 1000, 128)
    assert epoch1 != out
    assert ds.__getitems__(list(range(990, 1010))) == [ds[i] for i in range(990, 1010)]
    idx = np.array([5, 900, 1500, 3, 999])
    assert ds.__getitems__(idx) == [ds[int(i)] for i in idx]


def test_map_pipe_batch_and_seed_contract():
    ds = (
        grain.MapDataset.source(range(1000))
        .pipe(grain.experimental.WindowShuffleMapDataset, window_size=128, seed=0)
        .batch(16)
    )
    assert len(ds) == 63 and ds[0].shape == (16,)
    a = list(
        grain.experimental.WindowShuffleMapDataset(
            grain.MapDataset.source(range(50)).seed(1), window_size=10
        )
    )
    b = list(
        grain.experimental.WindowShuffleMapDataset(
            grain.MapDataset.source(range(50)).seed(2), window_size=10
        )
    )
    assert a != b
    _windows_ok(a, 50, 10)


def test_iter_window_shuffle():
    parent = grain.MapDataset.source(range(103)).to_iter_dataset()
    out = list(grain.experimental.WindowShuffleIterDataset(parent, window_size=10, seed=3))
    _windows_ok(out, 103, 10)
    assert out != list(range(103))
    seeded = grain.experimental.WindowShuffleIterDataset(
        grain.MapDataset.source(range(50)).to_iter_dataset().seed(7), window_size=10
    )
    assert list(seeded) != list(range(50))
    testing.check_deterministic(lambda: seeded)


@pytest.mark.parametrize("w", [1, 7, 10, 200])
def test_iter_checkpoint(w):
    ds = grain.experimental.WindowShuffleIterDataset(
        grain.MapDataset.source(range(60)).to_iter_dataset(), window_size=w, seed=1
    )
    testing.assert_equal_output_after_checkpoint(ds, checkpoints=range(61))


def test_map_checkpoint():
    ds = grain.experimental.WindowShuffleMapDataset(
        grain.MapDataset.source(range(40)), window_size=6, seed=2
    )
    testing.assert_equal_output_after_checkpoint(ds)


def test_bad_inputs():
    with pytest.raises(ValueError):
        grain.experimental.WindowShuffleMapDataset(grain.MapDataset.source(range(4)), window_size=0)
    with pytest.raises(TypeError):
        grain.experimental.WindowShuffleMapDataset(grain.MapDataset.source(range(4)), window_size=2.5)
    with pytest.raises(TypeError):
        grain.experimental.WindowShuffleIterDataset(grain.MapDataset.source(range(4)), window_size=2)
    with pytest.raises(TypeError):
        grain.experimental.WindowShuffleMapDataset(
            grain.MapDataset.source(range(4)).to_iter_dataset(), window_size=2
        )


def test_refuses_foreign_state():
    def mk(seed):
        return iter(
            grain.experimental.WindowShuffleIterDataset(
                grain.MapDataset.source(range(20)).to_iter_dataset(), window_size=5, seed=seed
            )
        )

    it = mk(1)
    next(it)
    state = json.loads(json.dumps(it.get_state()))
    with pytest.raises(StateMismatchError):
        mk(2).set_state(state)


def test_cli_lists_the_plugin_with_its_version():
    from grain_core import testing as kit

    kit.check_plugin_listed("window_shuffle", "grain-plugin-window-shuffle", ["WindowShuffleMapDataset", "WindowShuffleIterDataset"])


class _Chunks(grain.IterDataset):
    """range(n) served in chunks of at most 3 elements, so a window of 8 takes several reads; its
    iterator class is this test's own, so an Injector on it touches nothing else."""

    def __init__(self, n):
        super().__init__()
        self._n = n

    def __iter__(self):
        return _ChunksIterator(self._n)


class _ChunksIterator(grain.DatasetIterator):
    def __init__(self, n):
        super().__init__()
        self._n, self._pos = n, 0

    def __next__(self):
        if self._pos >= self._n:
            raise StopIteration
        self._pos += 1
        return self._pos - 1

    def next_chunk(self, max_elements):
        if self._pos >= self._n:
            raise StopIteration
        stop = min(self._n, self._pos + min(max_elements, 3))
        chunk = list(range(self._pos, stop))
        self._pos = stop
        return chunk

    def get_state(self):
        return {"pos": self._pos}

    def set_state(self, state):
        self._pos = state["pos"]


def test_iter_interrupted_window_read_loses_nothing():
    # KeyboardInterrupt in the parent's next_chunk while a window is half read: the elements read
    # so far are kept, the state taken right then restores to the same continuation, and the
    # drained output equals the uninterrupted one.
    def make():
        return grain.experimental.WindowShuffleIterDataset(_Chunks(50), window_size=8, seed=5)

    expected = list(make())
    assert sorted(expected) == list(range(50))
    it = iter(make())
    out, states = [], []
    with testing.Injector(_ChunksIterator, "next_chunk", every=2) as injector:
        while True:
            try:
                out.append(next(it))
            except StopIteration:
                break
            except KeyboardInterrupt:
                states.append((len(out), it.get_state()))
    assert out == expected
    assert injector.count >= 5 and len(states) == injector.count
    for emitted, state in states:
        resumed = iter(make())
        resumed.set_state(state)
        assert list(resumed) == expected[emitted:]


@pytest.mark.parametrize("size", [1, 3, 8, 1000])
def test_iter_next_chunk_serves_slices_of_the_window(size):
    ds = grain.experimental.WindowShuffleIterDataset(grain.MapDataset.range(30).to_iter_dataset(), 8, 2)
    expected = list(ds)
    it = iter(ds)
    chunks = []
    while True:
        try:
            chunks.append(it.next_chunk(size))
        except StopIteration:
            break
    assert [x for c in chunks for x in c] == expected
    # Never across a window boundary: each chunk lies in one window.
    pos = 0
    for c in chunks:
        assert 1 <= len(c) <= size and pos // 8 == (pos + len(c) - 1) // 8
        pos += len(c)


def test_iter_interrupt_while_ordering_the_last_window_loses_nothing():
    # The parent is exhausted while the last, partial window is read; a KeyboardInterrupt while
    # its order is computed must not drop the elements already read.
    from grain_plugin_window_shuffle import window_shuffle

    def make():
        return grain.experimental.WindowShuffleIterDataset(_Chunks(20), window_size=8, seed=1)

    expected = list(make())
    it = iter(make())
    out = [next(it) for _ in range(16)]
    with testing.Injector(window_shuffle, "window_permutation", every=1) as injector:
        with pytest.raises(KeyboardInterrupt):
            next(it)
    assert injector.count == 1
    state = it.get_state()
    out += list(it)
    assert out == expected
    resumed = iter(make())
    resumed.set_state(state)
    assert list(resumed) == expected[16:]


def test_iter_real_interrupts_lose_nothing():
    # Real SIGALRM KeyboardInterrupts landing anywhere in the plugin or the kernel (window reads,
    # order tables, serving); capped so iteration always finishes.
    import grain_plugin_window_shuffle

    def make():
        opts = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
        return grain.experimental.WindowShuffleIterDataset(
            grain.MapDataset.range(5000).to_iter_dataset(opts), window_size=1000, seed=7
        )

    expected = list(make())
    out, _ = testing.drain_with_interrupts(
        iter(make()), packages=[grain, grain_plugin_window_shuffle], max_interrupts=40
    )
    assert out == expected


@pytest.mark.parametrize("clip", [False, True])
def test_map_random_access_over_many_windows_equals_sequential_read(clip, monkeypatch):
    # Random access keeps one permutation per window read, up to a bound on the indices they
    # cover; past it the kept ones are dropped and rebuilt. Every path gives the same elements.
    from grain_plugin_window_shuffle import window_shuffle

    monkeypatch.setattr(window_shuffle, "_MAX_CACHED_INDICES", 3 * 100)
    ds = grain.experimental.WindowShuffleMapDataset(
        grain.MapDataset.range(2_000), window_size=100, seed=5, clip_last_window=clip
    )
    sequential = ds.__getitems__(list(range(4_000)))  # two epochs
    order = np.random.default_rng(0).permutation(4_000).tolist()
    assert [ds[i] for i in order] == [sequential[i] for i in order]
    assert 0 < len(ds._perms) <= 3
    assert ds.shuffle(seed=1).__getitems__(list(range(2_000))) == [
        sequential[i] for i in grain.MapDataset.range(2_000).shuffle(seed=1)
    ]
