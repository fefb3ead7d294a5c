"""Which error a bad state gets on its way down (``set_state`` -> ``round_robin.read_state`` ->
``elastic.adapt_state`` -> ``grain_core.state``): a state of another pipeline, or an ``mp_prefetch``
state that lacks a field, is refused with the usual message wherever it enters, and the iterator is
left as it was."""

from __future__ import annotations

import pytest

import grain_core as grain
from grain_core.checkpoint.files import restore_iterator
from grain_core.dataset.elastic import MP_KIND
from grain_core.state import StateMismatchError

pytestmark = pytest.mark.timeout(120)


def _pipe(k: int):
    ds = grain.MapDataset.range(12).map(lambda x: x).to_iter_dataset()
    return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=k)) if k else ds


def test_state_of_another_kind_into_workers_gets_the_usual_message():
    with iter(_pipe(2)) as it:
        next(it)
        before = it.get_state()
        with pytest.raises(
            StateMismatchError,
            match=r"saved by a 'MapDatasetIterator' iterator, but it is being restored into a "
            r"'MultiprocessPrefetchDatasetIterator' iterator",
        ):
            it.set_state({"kind": "MapDatasetIterator", "next_index": 3})
        assert it.get_state() == before
        assert next(it) == 1


def test_worker_state_lacking_a_field_into_other_worker_count():
    with iter(_pipe(3)) as it:
        before = it.get_state()
        with pytest.raises(StateMismatchError, match=r"state lacks \['workers'\]"):
            it.set_state({"kind": MP_KIND, "num_workers": 2, "next_worker": 0})
        assert it.get_state() == before


def test_worker_state_lacking_a_field_restored_in_process():
    it = iter(_pipe(0))
    next(it)
    before = it.get_state()
    with pytest.raises(
        grain.checkpoint.CheckpointPipelineMismatchError, match=r"lacks \['workers'\]"
    ):
        restore_iterator(it, {"kind": MP_KIND, "num_workers": 2, "next_worker": 0})
    assert it.get_state() == before
