"""set_state validates every field against the pipeline before changing anything (issues 13, 15).

* Wrong types (``next_index="3"``, ``3.5``, ``True``) and negative positions are refused, in
  process and nested anywhere in a state, with a message naming the field.
* A refused state leaves every stage untouched, kernel or plugin: the kernel rolls back a
  ``set_state`` that fails half-way, even for a stage written Grain style (its own ``set_state``).
* A mismatch names the field of the stage that differs ("batch_size 32 vs 64"), not digests.
* The public helpers (``check_state_int``, ``StateField``) refuse what they document.
"""

from __future__ import annotations

import json

import pytest

import grain_core as grain
from grain_core import state as st
from grain_core import testing
from grain_core.dataset.stages import (
    ManyParentIterator,
    ManyParentIterDataset,
    OneParentIterator,
    OneParentIterDataset,
    SourceIterator,
    SourceIterDataset,
)
from grain_core.state import InvalidStateError, StateField, StateMismatchError


def _advanced(ds, n):
    it = iter(ds)
    for _ in range(n):
        next(it)
    return it


@pytest.mark.parametrize("bad", ["3", 3.5, True, None, -1, 10**12])
def test_next_index_of_the_wrong_type_or_range_is_refused(bad):
    ds = grain.MapDataset.range(20).to_iter_dataset()
    it = _advanced(ds, 4)
    before = it.get_state()
    if bad is None:
        # None means "not started" in nested states; at a known int position it is refused by the
        # stage's own check.
        with pytest.raises((StateMismatchError, TypeError)):
            it.set_state({**before, "next_index": bad})
    else:
        with pytest.raises(StateMismatchError, match="next_index"):
            it.set_state({**before, "next_index": bad})
    assert it.get_state() == before
    assert list(it) == list(range(4, 20))


@pytest.mark.parametrize("bad", ["3", 3.5, True])
def test_wrong_types_nested_in_a_state_are_refused_naming_the_path(bad):
    ds = grain.MapDataset.range(20).to_iter_dataset().batch(2).map(lambda b: b.sum())
    it = _advanced(ds, 2)
    state = it.get_state()
    bad_state = json.loads(json.dumps(state))
    node = bad_state
    while "next_index" not in node:
        node = node["parent"]
    node["next_index"] = bad
    with pytest.raises(InvalidStateError, match=r"state\.parent\.parent\.next_index"):
        it.set_state(bad_state)
    assert it.get_state() == state
    assert [int(x) for x in it] == [int(2 * i + 2 * i + 1) for i in range(2, 10)]


def test_a_map_pipeline_mismatch_names_the_stage_field_not_digests():
    a = grain.MapDataset.range(100).batch(32).to_iter_dataset()
    b = grain.MapDataset.range(100).batch(64).to_iter_dataset()
    state = _advanced(a, 1).get_state()
    with pytest.raises(StateMismatchError, match="BatchMapDataset batch_size 32 vs 64") as e:
        iter(b).set_state(state)
    assert state["fingerprint"] not in str(e.value)
    # The source is named when it is what differs.
    c = grain.MapDataset.range(101).batch(32).to_iter_dataset()
    with pytest.raises(StateMismatchError, match="SourceMapDataset source .*100.* vs .*101"):
        iter(c).set_state(state)
    # check_same_pipeline (used for states in mp_prefetch workers) explains the same way.
    with pytest.raises(StateMismatchError, match=r"state\.fingerprint.*batch_size 32 vs 64"):
        st.check_same_pipeline(iter(b).get_state(), state)


def test_an_iter_pipeline_mismatch_names_the_field():
    a = grain.MapDataset.range(100).to_iter_dataset().batch(32)
    b = grain.MapDataset.range(100).to_iter_dataset().batch(64)
    with pytest.raises(StateMismatchError, match="batch_size=32.*64"):
        iter(b).set_state(_advanced(a, 1).get_state())


# --- a Grain-style stage that changes itself before failing is rolled back by the kernel ----------


class _Careless(grain.DatasetIterator):
    """Overrides set_state itself and moves its parent before checking anything."""

    def __init__(self, parent):
        super().__init__(parent)

    def __next__(self):
        return next(self.parents[0])

    def get_state(self):
        return {"kind": "Careless", "parent": self.parents[0].get_state()}

    def set_state(self, state):
        self.parents[0].set_state(state["parent"])
        if state.get("kind") != "Careless":
            raise StateMismatchError("not a Careless state")


def test_grain_style_set_state_is_rolled_back_by_the_kernel():
    parent = iter(grain.MapDataset.range(10).to_iter_dataset())
    it = _Careless(parent)
    next(it), next(it)
    before = it.get_state()
    other = {"kind": "Other", "parent": {**before["parent"], "next_index": 7}}
    with pytest.raises(StateMismatchError, match="not a Careless"):
        it.set_state(other)
    assert it.get_state() == before
    assert list(it) == list(range(2, 10))


# --- the stage-author API: declared fields are validated before restore_state runs ----------------


class _EveryOther(OneParentIterDataset):
    def __iter__(self):
        return _EveryOtherIterator(iter(self.parent))


class _EveryOtherIterator(OneParentIterator):
    kind = "EveryOther"

    def __init__(self, parent):
        super().__init__(parent)
        self.count = 0
        self.restores = 0

    def __next__(self):
        x = next(self.parent)
        next(self.parent, None)
        self.count += 1
        return x

    def get_state(self):
        return st.make_state(self.kind, parent=self.parent.get_state(), count=self.count, step=2)

    def state_fields(self):
        return {
            "parent": StateField.parent(),
            "count": StateField.position(0, 10),
            "step": StateField.identity(),
        }

    def restore_state(self, state):
        self.restores += 1
        self.parent.set_state(state["parent"])
        self.count = state["count"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"count": "1"}, "count must be an int"),
        ({"count": 11}, r"count is 11, outside \[0, 10\]"),
        ({"step": 3}, "EveryOther: step 3 vs 2"),
        ({"kind": "Other"}, "'Other' iterator"),
    ],
)
def test_declared_fields_are_checked_before_restore_state(change, message):
    it = _advanced(_EveryOther(grain.MapDataset.range(20).to_iter_dataset()), 2)
    before = it.get_state()
    with pytest.raises(StateMismatchError, match=message):
        it.set_state({**before, **change})
    assert it.restores == 0 and it.get_state() == before


def test_a_parent_field_is_checked_by_the_parent():
    it = _advanced(_EveryOther(grain.MapDataset.range(20).to_iter_dataset()), 2)
    before = it.get_state()
    other = iter(grain.MapDataset.range(21).to_iter_dataset()).get_state()
    with pytest.raises(StateMismatchError, match="SourceMapDataset"):
        it.set_state({**before, "parent": other})
    assert it.get_state() == before
    assert list(it) == list(range(4, 20, 2))


def test_the_documented_stage_passes_the_kit():
    testing.check_stage(lambda: _EveryOther(grain.MapDataset.range(20).to_iter_dataset()))


def test_check_state_int():
    assert st.check_state_int(5, "skip", maximum=5) == 5
    for bad in ("5", 5.0, True, None):
        with pytest.raises(InvalidStateError, match="skip must be an int") as e:
            st.check_state_int(bad, "skip", where="MultiprocessPrefetchIterDataset")
        assert isinstance(e.value, TypeError) and isinstance(e.value, StateMismatchError)
    with pytest.raises(InvalidStateError, match=r"skip is 1000000000000, outside \[0, 256\]"):
        st.check_state_int(10**12, "skip", maximum=256)


# --- the other base classes of the stage-author API ----------------------------------------------


class _Alternate(ManyParentIterDataset):
    """Elements of its parents in turn, until one ends."""

    def __iter__(self):
        return _AlternateIterator([iter(p) for p in self.parents])


class _AlternateIterator(ManyParentIterator):
    kind = "Alternate"

    def __init__(self, parents):
        super().__init__(parents)
        self.turn = 0

    def __next__(self):
        x = next(self.parents[self.turn])
        self.turn = (self.turn + 1) % len(self.parents)
        return x

    def position_fields(self):
        return {"turn": StateField.position(0, len(self.parents) - 1)}

    def position_state(self):
        return {"turn": self.turn}

    def restore_position(self, state):
        self.turn = state["turn"]


def _alternate(n=3):
    return _Alternate([grain.MapDataset.range(10 * i, 10 * i + 6).to_iter_dataset() for i in range(n)])


def test_many_parent_stage():
    assert list(iter(_alternate(2))) == [0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15]
    it = _advanced(_alternate(), 4)
    before = it.get_state()
    with pytest.raises(StateMismatchError, match="turn is 3"):
        it.set_state({**before, "turn": 3})
    with pytest.raises(StateMismatchError, match="parents 2 vs 3"):
        it.set_state({**before, "parents": before["parents"][:2]})
    assert it.get_state() == before
    testing.check_stage(_alternate, foreign=lambda: _alternate(2))


class _Countdown(SourceIterDataset):
    def __init__(self, start):
        super().__init__()
        self.start = start

    def __iter__(self):
        return _CountdownIterator(self.start)


class _CountdownIterator(SourceIterator):
    kind = "Countdown"

    def __init__(self, start):
        super().__init__()
        self.start, self.left = start, start

    def __next__(self):
        if not self.left:
            raise StopIteration
        self.left -= 1
        return self.left

    def get_state(self):
        return st.make_state(self.kind, start=self.start, left=self.left)

    def state_fields(self):
        return {"start": StateField.identity(), "left": StateField.position(0, self.start)}

    def restore_state(self, state):
        self.left = state["left"]


def test_source_stage():
    assert list(iter(_Countdown(3))) == [2, 1, 0]
    testing.check_stage(lambda: _Countdown(12), foreign=lambda: _Countdown(13))


class _GrainStyle(grain.DatasetIterator):
    def __init__(self):
        super().__init__()
        self.i = 0

    def __next__(self):
        self.i += 1
        return self.i

    def get_state(self):
        return {"i": self.i}

    def set_state(self, state):
        super().set_state(state)  # as Grain's examples may do: the base has nothing to restore
        self.i = state["i"]


def test_grain_style_iterators_may_call_the_base_set_state():
    it = _GrainStyle()
    next(it)
    it.set_state({"i": 5})
    assert next(it) == 6
    with pytest.raises(InvalidStateError, match=r"state\.i must be an int"):
        it.set_state({"i": "5"})
    assert next(it) == 7


@pytest.mark.parametrize("skip", [10**12, -1, "3", 2.0])
def test_an_mp_prefetch_skip_count_out_of_range_is_refused(skip):
    ds = grain.MapDataset.range(40).to_iter_dataset().mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2)
    )
    with iter(ds) as it:
        state = it.get_state()
        bad = json.loads(json.dumps(state))
        bad["workers"][1]["skip"] = skip
        with pytest.raises(InvalidStateError, match=r"skip"):
            it.set_state(bad)
        assert it.get_state() == state
        assert list(it) == list(range(40))
