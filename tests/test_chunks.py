"""The chunk protocol (``DatasetIterator.next_chunk``) and chunked reading in ``to_iter_dataset``:
exact states, exceptions part-way through a chunk, error context, slow elements, memory bounds."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import grain_core as grain

SEEDS = range(int(os.environ.get("GRAIN_CORE_CHUNK_SEEDS", "12")))  # random pipelines per test
SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
ALL_OPTIONS = [
    SYNC,
    grain.ReadOptions(num_threads=0),
    grain.ReadOptions(num_threads=2, prefetch_buffer_size=0),
    grain.ReadOptions(num_threads=2, prefetch_buffer_size=1),
    grain.ReadOptions(num_threads=2, prefetch_buffer_size=7),
    grain.ReadOptions(),
]


class CountingSource:
    """A source recording every bulk read (its indices, and in ``readers`` the reading thread's
    name) and the highest index asked for."""

    def __init__(self, n: int, make=lambda i: i):
        self._n, self._make = n, make
        self.calls: list[list[int]] = []
        self.readers: list[str] = []
        self.max_stop = 0
        self._lock = threading.Lock()

    def __len__(self):
        return self._n

    def __getitem__(self, i):
        return self._make(i)

    def __getitems__(self, indices):
        idx = [int(i) for i in indices]
        with self._lock:
            self.calls.append(idx)
            self.readers.append(threading.current_thread().name)
            self.max_stop = max([self.max_stop, *(i + 1 for i in idx)])
        return [self._make(i) for i in idx]


def _pipeline(options):
    return (
        grain.MapDataset.range(300)
        .to_iter_dataset(options)
        .map(lambda x: x * 2)
        .filter(lambda x: x % 3 != 0)
        .random_map(lambda x, rng: x + int(rng.integers(10)), seed=3)
        .map_with_index(lambda i, x: (i, x))
    )


@pytest.mark.parametrize("options", ALL_OPTIONS, ids=repr)
def test_next_chunk_matches_next_and_states_are_exact(options):
    expected = list(_pipeline(options))
    it = iter(_pipeline(options))
    got, states = [], []
    sizes = [1, 5, 2, 64, 3]
    try:
        for k in range(10_000):
            chunk = it.next_chunk(sizes[k % len(sizes)])
            assert 1 <= len(chunk) <= sizes[k % len(sizes)]
            got += chunk
            states.append((len(got), it.get_state()))
    except StopIteration:
        pass
    assert got == expected
    for pos, state in states[::7]:
        fresh = iter(_pipeline(options))
        fresh.set_state(state)
        assert list(fresh) == expected[pos:]


def test_default_next_chunk_serves_third_party_iterators():
    class Counter(grain.DatasetIterator):
        def __init__(self):
            super().__init__()
            self.i = 0

        def __next__(self):
            if self.i >= 10:
                raise StopIteration
            self.i += 1
            return self.i

        def get_state(self):
            return {"i": self.i}

        def set_state(self, state):
            self.i = state["i"]

    class Counting(grain.IterDataset):
        def __iter__(self):
            return Counter()

    it = iter(Counting().map(lambda x: -x).batch(4))
    assert [b.tolist() for b in it] == [[-1, -2, -3, -4], [-5, -6, -7, -8], [-9, -10]]
    c = Counter()
    assert c.next_chunk(5) == [1]


def test_zero_buffer_reads_chunks_not_single_elements():
    src = CountingSource(5000)
    assert list(grain.MapDataset.source(src).to_iter_dataset(SYNC)) == list(range(5000))
    assert max(len(c) for c in src.calls) > 1
    assert len(src.calls) < 5000


def test_chunks_are_bounded_by_bytes():
    big = CountingSource(40, lambda i: np.full(1 << 20, i % 256, dtype=np.uint8))  # 1 MiB each
    for x, i in zip(grain.MapDataset.source(big).to_iter_dataset(SYNC), range(40)):
        assert x[0] == i % 256
    assert max(len(c) for c in big.calls) <= 4  # CHUNK_BYTES is 4 MiB


@pytest.mark.parametrize("buffer", [1, 5, 16])
def test_read_ahead_never_exceeds_the_buffer(buffer):
    check_read_ahead_within_buffer(buffer)


def check_read_ahead_within_buffer(buffer, prepare=lambda it: None):
    """The check of the test above; ``prepare(it)`` adjusts the fresh iterator first."""
    src = CountingSource(400)
    it = iter(
        grain.MapDataset.source(src).to_iter_dataset(
            grain.ReadOptions(num_threads=3, prefetch_buffer_size=buffer)
        )
    )
    prepare(it)
    received = 0
    for x in it:
        received += 1
        assert x == received - 1
        # Everything read (or being read) is within `buffer` elements of the consumer: the
        # unreturned rest of the current chunk counts. (`_read_to`, the end of what was queued,
        # is checked too: a pool read may not have started when the consumer looks.)
        assert src.max_stop <= received + buffer
        assert it._read_to <= received + buffer
    assert received == 400


class Boom(Exception):
    pass


def _failing_map(bad):
    def f(x):
        if x in bad:
            raise Boom(f"bad element {x}")
        return x * 10

    return f


@pytest.mark.parametrize("options", [SYNC, grain.ReadOptions()], ids=["sync", "default"])
def test_iter_map_error_names_the_element_and_continuing_is_exact(options):
    ds = grain.MapDataset.range(100).to_iter_dataset(options).map(_failing_map({37})).batch(8)
    it = iter(ds)
    got = []
    with pytest.raises(Boom) as info:
        while True:
            got.append(next(it).tolist())
    assert any("element #37" in n for n in info.value.__notes__), info.value.__notes__
    assert any("MapIterDataset" in n for n in info.value.__notes__)
    # As with element-wise reading, the batch being built is lost and the failing element is
    # consumed; the state is exact: a fresh iterator restored to it continues identically.
    state = it.get_state()
    rest = [b.tolist() for b in it]
    flat = [x for b in got + rest for x in b]
    assert flat == [x * 10 for x in range(100) if not 32 <= x <= 37]
    fresh = iter(ds)
    fresh.set_state(state)
    assert [b.tolist() for b in fresh] == rest


def test_iter_map_error_in_a_chunk_delivers_the_elements_before_it():
    ds = grain.MapDataset.range(50).to_iter_dataset(SYNC).map(_failing_map({20}))
    it = iter(ds)
    got = []
    with pytest.raises(Boom) as info:
        while True:
            got += it.next_chunk(64)
    assert got == [x * 10 for x in range(20)]
    assert any("element #20" in n for n in info.value.__notes__)
    assert list(it) == [x * 10 for x in range(21, 50)]


def test_filter_error_names_the_element():
    def keep(x):
        if x == 12:
            raise Boom("no")
        return x % 2 == 0

    it = iter(grain.MapDataset.range(30).to_iter_dataset(SYNC).filter(keep).batch(4))
    with pytest.raises(Boom) as info:
        list(it)
    assert any("FilterIterDataset" in n and "element #12" in n for n in info.value.__notes__)


def test_interrupt_inside_a_chunk_loses_nothing():
    """A KeyboardInterrupt raised in the map function (Ctrl-C) leaves the iterator consistent:
    continuing yields exactly the remaining elements, the interrupted one included."""
    armed = {"on": True}

    def f(x):
        if x == 45 and armed["on"]:
            armed["on"] = False
            raise KeyboardInterrupt
        return x + 1

    ds = grain.MapDataset.range(100).to_iter_dataset(SYNC).map(f).filter(lambda x: x % 5).batch(6)
    expected = [
        b.tolist()
        for b in grain.MapDataset.range(100)
        .to_iter_dataset(SYNC)
        .map(lambda x: x + 1)
        .filter(lambda x: x % 5)
        .batch(6)
    ]
    it = iter(ds)
    got = []
    with pytest.raises(KeyboardInterrupt):
        while True:
            got.append(next(it).tolist())
    got += [b.tolist() for b in it]
    assert got == expected


@pytest.mark.parametrize("threads", [0, 4])
def test_map_dataset_error_names_the_index(threads):
    ds = (
        grain.MapDataset.range(64)
        .map(_failing_map({29}))
        .to_iter_dataset(grain.ReadOptions(num_threads=threads))
    )
    it = iter(ds)
    got = []
    with pytest.raises(Boom) as info:
        for x in it:
            got.append(x)
    assert got == [x * 10 for x in range(29)]
    assert any("index 29" in n for n in info.value.__notes__), info.value.__notes__


def test_slow_element_does_not_hold_back_finished_earlier_ones():
    """With threads, element 35 blocks until the consumer has received elements 0..34: a
    pipeline that waited for element 35 before handing out the ones before it would never get
    there (the guard timer releases it after 120 s and the test fails). Element 35 is in the
    sixth chunk, read by the pool: the default policy reads inline (the consumer reads the chunk
    itself, where a slow element holds back its own chunk) only after eight quick chunks in a
    row; tests/test_read_policy.py runs this check with the pool modes scripted."""
    check_slow_element_does_not_hold_back()


def check_slow_element_does_not_hold_back(prepare=lambda it: None):
    """The check of the test above; ``prepare(it)`` adjusts the fresh iterator first (the read
    policy's tests script its decisions with it)."""
    release = threading.Event()
    guard = threading.Timer(120, release.set)
    guard.daemon = True

    def f(x):
        if x == 35:
            release.wait()
        return x

    ds = (
        grain.MapDataset.range(100)
        .map(f)
        .to_iter_dataset(grain.ReadOptions(num_threads=4, prefetch_buffer_size=64))
    )
    it = iter(ds)
    prepare(it)
    guard.start()
    try:
        got = [next(it) for _ in range(35)]
        released_by_guard = release.is_set()
        release.set()
        got += list(it)
    finally:
        guard.cancel()
        release.set()
        it.close()
    assert not released_by_guard, "elements 0..34 were held back behind the slow element 35"
    assert got == list(range(100))


class _Opaque(grain.IterDataset):
    """Passes elements through one ``next()`` at a time (a third-party stage without the chunk
    protocol): stages above it read element by element — the reference behaviour."""

    def __init__(self, parent):
        super().__init__(parent)

    def __iter__(self):
        parent = iter(self.parents[0])

        class It(grain.DatasetIterator):
            def __next__(self):
                return next(parent)

            def get_state(self):
                return parent.get_state()

            def set_state(self, state):
                parent.set_state(state)

        return It(parent)


def _run_collecting(it, limit=400):
    """Everything ``it`` yields, with exceptions recorded in place (iteration continues)."""
    out = []
    for _ in range(limit):
        try:
            x = next(it)
        except StopIteration:
            break
        except (Boom, KeyboardInterrupt) as e:
            out.append(("raised", type(e).__name__))
            continue
        out.append(x.tolist() if isinstance(x, np.ndarray) else x)
    return out


def _random_pipeline(seed, opaque, bad=(), stop=()):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 120))
    m = int(rng.integers(2, 5))
    bs = int(rng.integers(1, 7))
    opts = ALL_OPTIONS[seed % len(ALL_OPTIONS)]
    bad = {b % n for b in bad}
    armed = {x % n for x in stop}
    calls = {"map": [], "filter": []}

    def f(x):
        calls["map"].append(x)
        if x in bad:
            raise Boom(x)
        if x in armed:
            armed.discard(x)
            raise KeyboardInterrupt
        return x * 3

    def keep(x):
        calls["filter"].append(x)
        return x % m != 0

    ds = grain.MapDataset.range(n).to_iter_dataset(opts)
    if opaque:
        ds = _Opaque(ds)
    ds = ds.map(f)
    if opaque:
        ds = _Opaque(ds)
    ds = ds.filter(keep)
    if opaque:
        ds = _Opaque(ds)
    return ds.map_with_index(lambda i, x: x + 1000 * i).batch(bs), calls


@pytest.mark.parametrize("seed", SEEDS)
def test_chunked_stages_match_element_wise_reading_with_errors(seed):
    """Random map -> filter -> map_with_index -> batch pipelines with failing elements give the
    same outputs and errors, in the same order, and call every user function exactly as often,
    whether the stages pass chunks or single elements."""
    bad = np.random.default_rng(100 + seed).integers(0, 1000, size=seed % 4).tolist()
    ref_ds, ref_calls = _random_pipeline(seed, True, bad=bad)
    got_ds, got_calls = _random_pipeline(seed, False, bad=bad)
    assert _run_collecting(iter(got_ds)) == _run_collecting(iter(ref_ds))
    assert sorted(got_calls["filter"]) == sorted(ref_calls["filter"])
    assert sorted(got_calls["map"]) == sorted(ref_calls["map"])


@pytest.mark.parametrize("seed", SEEDS)
def test_interrupts_anywhere_lose_nothing(seed):
    """KeyboardInterrupts raised by the map function at random elements: continuing the same
    iterator after each gives exactly the batches of an uninterrupted run."""
    stop = np.random.default_rng(200 + seed).integers(0, 1000, size=1 + seed % 3).tolist()
    clean, _ = _random_pipeline(seed, False)
    got_ds, _ = _random_pipeline(seed, False, stop=stop)
    got = [x for x in _run_collecting(iter(got_ds)) if x != ("raised", "KeyboardInterrupt")]
    assert got == _run_collecting(iter(clean))


def _random_mix(seed, opaque, bad=(), stop=()):
    """``IterDataset.mix`` of two mapped ``to_iter_dataset`` inputs with random weights; with
    ``opaque`` its inputs cannot move back, so the mix reads them one element at a time."""
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(10, 90)) for _ in range(2)]
    weights = [float(rng.integers(1, 5)) for _ in range(2)]
    opts = ALL_OPTIONS[seed % len(ALL_OPTIONS)]
    bad = set(bad)
    armed = set(stop)

    def make(k):
        def f(x):
            if (k, x) in bad:
                raise Boom(x)
            if (k, x) in armed:
                armed.discard((k, x))
                raise KeyboardInterrupt
            return 1000 * k + x

        ds = grain.MapDataset.range(sizes[k]).to_iter_dataset(opts).map(f)
        return _Opaque(ds) if opaque else ds

    return grain.IterDataset.mix([make(0), make(1)], weights)


def _mix_faults(seed, base):
    rng = np.random.default_rng(base + seed)
    return [(int(rng.integers(2)), int(rng.integers(0, 60))) for _ in range(seed % 4)]


@pytest.mark.parametrize("seed", SEEDS)
def test_mix_reading_chunks_matches_element_wise_reading_with_errors(seed):
    """A mix serving ``next()`` from chunks it reads ahead gives the same elements and errors, in
    the same order, as a mix whose inputs are read one element at a time, also under ``batch``
    (which reads it with ``next_chunk``)."""
    bad = _mix_faults(seed, 300)
    assert _run_collecting(iter(_random_mix(seed, False, bad))) == _run_collecting(
        iter(_random_mix(seed, True, bad))
    )
    assert _run_collecting(iter(_random_mix(seed, False, bad).batch(3))) == _run_collecting(
        iter(_random_mix(seed, True, bad).batch(3))
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_mix_interrupts_lose_nothing(seed):
    """KeyboardInterrupts in an input's map while the mix reads ahead: continuing the same
    iterator gives exactly the elements of an uninterrupted run."""
    stop = _mix_faults(seed, 400) or [(0, 3)]
    got = _run_collecting(iter(_random_mix(seed, False, stop=stop)))
    clean = _run_collecting(iter(_random_mix(seed, False)))
    assert [x for x in got if x != ("raised", "KeyboardInterrupt")] == clean


@pytest.mark.parametrize("seed", SEEDS)
def test_mix_state_is_the_position_after_the_last_element_returned(seed):
    """States taken at random points of a mix that has read ahead restore, in a fresh iterator,
    to exactly the rest of the run, and equal the states of element-wise reading."""
    rng = np.random.default_rng(500 + seed)
    ref = list(_random_mix(seed, True))
    it, ref_it = iter(_random_mix(seed, False)), iter(_random_mix(seed, True))
    taken = 0
    while taken < len(ref):
        step = int(rng.integers(1, 9))
        for _ in range(min(step, len(ref) - taken)):
            assert next(it) == next(ref_it) == ref[taken]
            taken += 1
        state = it.get_state()
        assert state["position"] == ref_it.get_state()["position"]
        fresh = iter(_random_mix(seed, False))
        fresh.set_state(state)
        assert list(fresh) == ref[taken:]
    assert list(it) == []


def _random_filter(
    seed, opaque, bad=(), bad_keep=(), untruthy=(), stop=(), stop_keep=(), calls=None
):
    """``range(n).to_iter_dataset(opts).map(f).filter(keep)``: ``f`` raises ``Boom`` for the
    indices in ``bad`` and a ``KeyboardInterrupt`` (once) for those in ``stop``; ``keep`` raises
    ``Boom`` for ``bad_keep``, a ``KeyboardInterrupt`` (once) for ``stop_keep`` and returns an
    array (whose truth value raises ``ValueError``) for ``untruthy``. With ``opaque`` the filter's input cannot move back (element-wise reading, the
    reference)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(40, 400))
    m = int(rng.integers(2, 6))
    opts = ALL_OPTIONS[seed % len(ALL_OPTIONS)]
    armed = set(stop)
    armed_keep = set(stop_keep)

    def f(i):
        if i in bad:
            raise Boom(i)
        if i in armed:
            armed.discard(i)
            raise KeyboardInterrupt
        return i * 3

    def keep(x):
        if calls is not None:
            calls.append(x)
        if x // 3 in armed_keep:
            armed_keep.discard(x // 3)
            raise KeyboardInterrupt
        if x // 3 in bad_keep:
            raise Boom(x)
        if x // 3 in untruthy:
            return np.ones(2)
        return x % m != 0

    ds = grain.MapDataset.range(n).to_iter_dataset(opts).map(f)
    return (_Opaque(ds) if opaque else ds).filter(keep)


def _filter_faults(seed):
    rng = np.random.default_rng(700 + seed)
    pick = lambda k: {int(i) for i in rng.integers(0, 400, size=k)}  # noqa: E731
    return {
        "bad": pick(seed % 3),
        "bad_keep": pick((seed + 1) % 3),
        "untruthy": pick(seed % 2),
    }


def _events(it, limit=1000):
    """Everything ``it`` yields, errors recorded in place by type (iteration continues)."""
    out = []
    for _ in range(limit):
        try:
            out.append(next(it))
        except StopIteration:
            return out
        except (Boom, ValueError) as e:
            out.append(("raised", type(e).__name__))
    raise AssertionError("no end")


def _retrying(call):
    """``call()``, repeated after each ``KeyboardInterrupt`` (which must lose nothing)."""
    while True:
        try:
            return call()
        except KeyboardInterrupt:
            continue


@pytest.mark.parametrize("seed", SEEDS)
def test_filter_state_is_the_position_after_the_last_element_returned(seed):
    """A filter serving ``next()`` / ``next_chunk`` from elements it read ahead: after every call
    (of random sizes, through errors from the map, from the predicate and from a truth value, and
    interrupts), its state equals the state of element-wise reading, and a fresh pipeline restored
    to it gives exactly the rest of an element-wise run, errors included."""
    faults = _filter_faults(seed)
    stops = np.random.default_rng(800 + seed).integers(0, 400, size=12).tolist()
    stop, stop_keep = set(stops[:3]), set(stops[3:])
    rng = np.random.default_rng(900 + seed)
    it = iter(_random_filter(seed, False, stop=stop, stop_keep=stop_keep, **faults))
    ref = iter(_random_filter(seed, True, stop=stop, stop_keep=stop_keep, **faults))
    done = False
    while not done:
        k = 1 if rng.random() < 0.4 else int(rng.integers(2, 12))
        try:
            if k == 1:
                got = [_retrying(lambda: next(it))]
            else:
                got = _retrying(lambda k=k: it.next_chunk(k))
            assert 1 <= len(got) <= k
            for x in got:
                assert _retrying(lambda: next(ref)) == x
        except StopIteration:
            with pytest.raises(StopIteration):
                _retrying(lambda: next(ref))
            done = True
        except (Boom, ValueError) as e:
            with pytest.raises(type(e)):
                _retrying(lambda: next(ref))
        state = it.get_state()
        assert state == ref.get_state()
        if rng.random() < 0.3 or done:
            rest = iter(_random_filter(seed, True, **faults))
            rest.set_state(ref.get_state())
            fresh = iter(_random_filter(seed, False, **faults))
            fresh.set_state(state)
            assert _events(fresh) == _events(rest)


@pytest.mark.parametrize("seed", SEEDS)
def test_batched_filter_states_and_calls_match_element_wise_reading(seed):
    """``filter(...).batch(bs)`` with errors: the same batches and errors as with element-wise
    reading, the filter's state after each batch equals element-wise reading's, and the predicate
    is called exactly once per element (verdicts read ahead and given back are remembered)."""
    faults = _filter_faults(seed)
    bs = int(np.random.default_rng(seed).integers(1, 9))
    calls, ref_calls = [], []
    it = iter(_random_filter(seed, False, calls=calls, **faults).batch(bs))
    ref = iter(_random_filter(seed, True, calls=ref_calls, **faults).batch(bs))
    while True:
        try:
            got = next(it).tolist()
        except StopIteration:
            with pytest.raises(StopIteration):
                next(ref)
            break
        except (Boom, ValueError) as e:
            with pytest.raises(type(e)):
                next(ref)
        else:
            assert next(ref).tolist() == got
        assert it.get_state() == ref.get_state()
    assert sorted(calls) == sorted(ref_calls)
    assert len(calls) == len(set(calls))


def test_sources_get_lists_of_in_range_ints():
    # As in Grain, a source's bulk read gets a list of Python ints in [0, len): consecutive reads
    # by to_iter_dataset hand over list(range(...)), other reads the indices modulo the length.
    got: list[object] = []

    class Recording:
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return i

        def __getitems__(self, keys):
            got.append(keys)
            return list(keys)

    ds = grain.MapDataset.source(Recording())
    assert list(ds.to_iter_dataset(SYNC)) == list(range(10))
    assert ds.__getitems__(range(8, 13)) == [8, 9, 0, 1, 2]
    assert ds.__getitems__([3, 11, -1]) == [3, 1, 9]
    assert all(type(keys) is list and all(type(k) is int for k in keys) for keys in got)
    assert [k for keys in got[:-2] for k in keys] == list(range(10))
