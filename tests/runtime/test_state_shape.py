"""``grain_core.state.check_same_pipeline`` and its use by ``mp_prefetch``: a state from another
pipeline is refused by ``set_state`` itself, before anything changes; and the first element after a
(re)start comes from the calling thread."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

import grain_core as grain
from grain_core import state as st
from grain_core.state import StateMismatchError

pytestmark = pytest.mark.timeout(60)

MP = grain.MultiprocessingOptions
R = grain.MapDataset.range


def _pipelines():
    yield R(60).seed(1).shuffle().map(lambda x: x + 1).to_iter_dataset()
    yield R(60).filter(lambda x: x % 3).batch(4).to_iter_dataset(grain.ReadOptions(num_threads=2))
    yield R(60).to_iter_dataset().filter(lambda x: x % 4).batch(3, drop_remainder=True)
    yield R(30).seed(2).random_map(lambda x, r: x + int(r.integers(9))).repeat(2).to_iter_dataset()
    yield R(40).to_iter_dataset().seed(3).random_map(lambda x, r: x * int(r.integers(9)))
    yield grain.IterDataset.mix([R(20).to_iter_dataset(), R(100, 130).to_iter_dataset()], [2, 1])
    yield grain.experimental.LimitIterDataset(R(50).to_iter_dataset(), 17)
    yield grain.experimental.RebatchIterDataset(R(50).batch(7).to_iter_dataset(), 5)
    yield grain.experimental.ZipIterDataset(
        [R(9).to_iter_dataset(), R(5, 20).to_iter_dataset()], strict=False
    )
    yield grain.experimental.ThreadPrefetchIterDataset(
        R(30).map(lambda x: x * 2).to_iter_dataset(), 4
    )


# --- check_same_pipeline on its own ------------------------------------------------------------------


@pytest.mark.parametrize("ds", list(_pipelines()), ids=lambda d: type(d).__name__)
def test_every_state_of_a_pipeline_has_its_fresh_shape(ds):
    with iter(ds) as fresh:
        template = fresh.get_state()
    with iter(ds) as it:
        while True:
            st.check_same_pipeline(template, json.loads(json.dumps(it.get_state())))
            try:
                next(it)
            except StopIteration:
                break
        st.check_same_pipeline(template, it.get_state())  # exhausted


def _state_of(ds, advance=3):
    with iter(ds) as it:
        for _ in range(advance):
            next(it)
        return it.get_state()


@pytest.mark.parametrize(
    ("a", "b", "path"),
    [
        (R(50).shuffle(seed=1), R(50).shuffle(seed=2), "state.fingerprint"),
        (R(50), R(51), "state.fingerprint"),
        (R(50).batch(2), R(50).batch(3), "state.fingerprint"),
    ],
)
def test_other_map_pipelines_are_refused_naming_the_field(a, b, path):
    template = iter(b.to_iter_dataset()).get_state()
    with pytest.raises(StateMismatchError, match=path.replace(".", r"\.")):
        st.check_same_pipeline(template, _state_of(a.to_iter_dataset()))


def test_nested_differences_name_the_path():
    a = R(40).to_iter_dataset().batch(4)
    b = R(40).to_iter_dataset().batch(5)
    c = R(40).to_iter_dataset().map(lambda x: x).batch(4)
    with pytest.raises(StateMismatchError, match=r"state\.batch_size.*4.*5"):
        st.check_same_pipeline(iter(b).get_state(), _state_of(a))
    with pytest.raises(StateMismatchError, match=r"state\.parent\.kind.*MapIterDataset"):
        st.check_same_pipeline(iter(a).get_state(), _state_of(c))
    mixed_a = grain.IterDataset.mix([R(9).to_iter_dataset(), R(9).to_iter_dataset()], [1, 2])
    mixed_b = grain.IterDataset.mix([R(9).to_iter_dataset(), R(8).to_iter_dataset()], [1, 2])
    with pytest.raises(StateMismatchError, match=r"state\.parents\..*\.fingerprint"):
        st.check_same_pipeline(iter(mixed_b).get_state(), _state_of(mixed_a))


def test_rules_on_plain_dicts():
    template = {"kind": "K", "seed": 1, "pos": 0, "parent": {"kind": "P", "length": 5, "i": 0}}
    ok = {"kind": "K", "seed": 1, "pos": 9, "parent": {"kind": "P", "length": 5, "i": 4}, "x": 1}
    st.check_same_pipeline(template, ok)  # positions and unknown extra keys are not compared
    st.check_same_pipeline({"kind": "K", "slot": None}, {"kind": "K", "slot": {"kind": "Z"}})
    st.check_same_pipeline({"kind": "K", "carry": [1]}, {"kind": "K", "carry": [1, 2, 3]})
    with pytest.raises(StateMismatchError, match=r"state\.parent\.length.*7.*5"):
        st.check_same_pipeline(template, {**ok, "parent": {"kind": "P", "length": 7, "i": 0}})
    with pytest.raises(StateMismatchError, match=r"state\.pos.*lacks"):
        st.check_same_pipeline(template, {"kind": "K", "seed": 1, "parent": ok["parent"]})
    with pytest.raises(StateMismatchError, match=r"state\.fingerprint"):
        st.check_same_pipeline(template, {**ok, "fingerprint": "abc"})
    with pytest.raises(StateMismatchError, match=r"state\.kind"):
        st.check_same_pipeline(template, {**ok, "kind": "Other"})
    with pytest.raises(StateMismatchError, match=r"state\.parents\[1\]\.kind"):
        st.check_same_pipeline(
            {"kind": "Z", "parents": [{"kind": "A"}, {"kind": "B"}]},
            {"kind": "Z", "parents": [{"kind": "A"}, {"kind": "C"}]},
        )
    with pytest.raises(StateMismatchError, match=r"at saved\.n, the state has 2.* has 1"):
        st.check_same_pipeline(
            {"kind": "A", "n": 1}, {"kind": "A", "n": 2}, identifying={"n"}, where="saved"
        )
    st.check_same_pipeline({"kind": "A", "seed": 1}, {"kind": "A", "seed": 2}, identifying={"kind"})
    with pytest.raises(TypeError, match="expects the dict"):
        st.check_same_pipeline(template, "nope")
    before = json.dumps(ok, sort_keys=True)
    st.check_same_pipeline(template, ok)
    assert json.dumps(ok, sort_keys=True) == before  # nothing modified


# --- mp_prefetch: refusal in set_state ---------------------------------------------------------------


def _mp(seed=3, n=40, workers=2, batch=None):
    ds = R(n).shuffle(seed=seed).map(lambda x: {"x": np.full((8,), x), "i": x})
    if batch:
        ds = ds.batch(batch)
    return ds.to_iter_dataset().mp_prefetch(MP(num_workers=workers))


def _ids(elements):
    return [int(np.asarray(e["i"]).ravel()[0]) for e in elements]


@pytest.mark.parametrize(
    "other",
    [lambda: _mp(seed=4), lambda: _mp(n=41), lambda: _mp(batch=2)],
    ids=["seed", "length", "structure"],
)
def test_mp_set_state_refuses_other_pipeline_at_once_and_keeps_position(other):
    with iter(other()) as it_other:
        for _ in range(5):
            next(it_other)
        foreign = json.loads(json.dumps(it_other.get_state()))
    ds = _mp()
    with iter(ds) as it:
        expected_all = _ids(it)
    with iter(ds) as it:
        head = _ids([next(it) for _ in range(7)])
        before = it.get_state()
        with pytest.raises(StateMismatchError, match=r"state\.workers\[0\]\.state"):
            it.set_state(foreign)
        assert it.get_state() == before
        rest = _ids(it)  # continues where it was, without an error
    assert head + rest == expected_all


def test_mp_fresh_iterator_refuses_before_first_element():
    with iter(_mp(seed=9)) as other:
        next(other)
        next(other)
        foreign = other.get_state()
    with iter(_mp()) as it:
        fresh = it.get_state()
        with pytest.raises(StateMismatchError):
            it.set_state(foreign)
        assert it.get_state() == fresh
        assert sorted(_ids(it)) == list(range(40))


def test_mp_states_of_the_same_pipeline_are_accepted_everywhere():
    ds = _mp(n=24)
    states = []
    with iter(ds) as it:
        full = []
        while True:
            states.append(json.loads(json.dumps(it.get_state())))
            try:
                full += _ids([next(it)])
            except StopIteration:
                break
    with iter(ds) as it:
        for p in (0, 5, 24, 13, 1):
            it.set_state(states[p])
            assert _ids(it) == full[p:]


def test_mp_worker_setup_failure_still_reported_at_next():
    def init(i, k):
        raise OSError(f"cannot set up worker {i}")

    ds = R(10).to_iter_dataset().mp_prefetch(MP(num_workers=2), worker_init_fn=init)
    state = _state_of(R(10).to_iter_dataset().mp_prefetch(MP(num_workers=2)), advance=4)
    with iter(ds) as it:
        it.set_state(state)  # no template to compare with: checked by the worker, as before
        with pytest.raises(OSError, match="cannot set up worker"):
            next(it)


# --- to_iter_dataset: the first element after a (re)start ------------------------------------------


def test_first_element_after_restart_is_read_by_the_caller():
    where: list[str] = []

    def note(x):
        where.append(threading.current_thread().name)
        time.sleep(0.0002)
        return x

    ds = R(600).map(note).to_iter_dataset(grain.ReadOptions(num_threads=8))
    with iter(ds) as it:
        assert next(it) == 0
        # the caller read element 0 itself; pool threads may already be reading ahead by now
        assert where[0] == threading.current_thread().name
        for _ in range(300):
            next(it)
        # after a few milliseconds of reading by the caller, the pool took over
        assert any(w.startswith("grain_core-read") for w in where)
        state = it.get_state()
        expected = next(it)
        where.clear()
        it.set_state(state)
        assert next(it) == expected
        assert where[0] == threading.current_thread().name
        assert list(it) == list(range(expected + 1, 600))
