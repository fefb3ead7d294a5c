"""``get_element_spec`` answers for every kernel stage (issue 28 #4), with Grain 0.2.18's rules.

Grain's answers (recorded from google grain 0.2.18 by hand in the side venv): ``ZipMapDataset`` /
``ZipIterDataset`` give the tuple of their parents' specs; ``RebatchIterDataset(batch_size=5)``
over batches of 2 gives ``(5,)``; ``FlatMapIterDataset`` raises ``NotImplementedError``; a
``batch_fn`` with ``output_spec(input_spec, batch_size, drop_remainder)`` answers for the batch.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import grain_core as grain
from grain_core import testing
from grain_core.element_spec import ShapeDtypeStruct

get_spec = grain.experimental.get_element_spec
INT = ShapeDtypeStruct((), np.int64)


def r(n=10):
    return grain.MapDataset.range(n)


def test_zip_gives_the_tuple_of_its_parents_specs():
    assert get_spec(grain.experimental.ZipMapDataset([r(), r()])) == (INT, INT)
    z = grain.experimental.ZipIterDataset([r().to_iter_dataset(), r().batch(2).to_iter_dataset()])
    assert get_spec(z) == (INT, ShapeDtypeStruct((None,), np.int64))


def test_rebatch_replaces_the_leading_dimension_as_grain():
    ds = grain.experimental.RebatchIterDataset(r().batch(2).to_iter_dataset(), 5)
    assert get_spec(ds) == ShapeDtypeStruct((5,), np.int64)


class _Repeat2(grain.transforms.FlatMap):
    max_fan_out = 2

    def flat_map(self, x):
        return [x, x]


class _Repeat2WithSpec(_Repeat2):
    def output_spec(self, spec):
        return spec


def test_flat_map_needs_the_transforms_output_spec():
    with pytest.raises(NotImplementedError, match="not implemented for FlatMapIterDataset"):
        get_spec(grain.experimental.FlatMapIterDataset(r().to_iter_dataset(), _Repeat2()))
    assert (
        get_spec(grain.experimental.FlatMapIterDataset(r().to_iter_dataset(), _Repeat2WithSpec()))
        == INT
    )
    assert get_spec(grain.experimental.FlatMapMapDataset(r(), _Repeat2WithSpec())) == INT


class _PadTo:
    """Grain's BatchFn protocol: a callable with ``output_spec``."""

    def __call__(self, values, size=4):
        return grain.experimental.batch_and_pad(values, batch_size=size)

    def output_spec(self, input_spec, batch_size, drop_remainder):
        return ShapeDtypeStruct((4, *input_spec.shape), input_spec.dtype)


def test_batch_fn_with_output_spec_answers_for_the_batch():
    assert get_spec(r().batch(3, batch_fn=_PadTo())) == ShapeDtypeStruct((4,), np.int64)
    assert get_spec(r().batch(3, batch_fn=functools.partial(_PadTo(), size=4))).shape == (4,)
    with pytest.raises(NotImplementedError, match="custom batching functions"):
        get_spec(r().batch(3, batch_fn=list))


def test_elastic_iterator_gives_per_shard_batches():
    ds = grain.experimental.ElasticIterator(
        r(), global_batch_size=4, shard_options=grain.sharding.ShardOptions(0, 2)
    )
    assert get_spec(ds) == ShapeDtypeStruct((2,), np.int64)


class _GrainStyle(grain.IterDataset):
    """A dataset written for Grain: reads its parent's ``_element_spec`` and changes it."""

    def __init__(self, parent):
        super().__init__(parent)

    def __iter__(self):
        return iter(self._parent.map(lambda x: np.full(3, x)))

    @property
    def _element_spec(self):
        parent = self._parent._element_spec
        return ShapeDtypeStruct((3, *parent.shape), parent.dtype)


def test_grain_style_datasets_answer_for_themselves_and_read_their_parents_hook():
    ds = _GrainStyle(r().to_iter_dataset().batch(2, drop_remainder=True))
    assert get_spec(ds) == ShapeDtypeStruct((3, 2), np.int64)
    assert ds._element_spec == get_spec(ds)
    assert r().batch(2)._element_spec == get_spec(r().batch(2))


_KERNEL_PIPELINES = {
    "source": lambda: r(),
    "shuffle_slice_repeat": lambda: r().shuffle(seed=1)[2:8].repeat(2),
    "filter_batch": lambda: r().filter(lambda x: x % 2).batch(2),
    "map": lambda: r().map(_Plus()),
    "concatenate_mix": lambda: grain.MapDataset.mix(
        [r(), grain.MapDataset.concatenate([r(), r()])]
    ),
    "zip": lambda: grain.experimental.ZipMapDataset([r(), r().map(_Plus())]),
    "iter_stages": lambda: grain.experimental.LimitIterDataset(
        r().to_iter_dataset(grain.ReadOptions(num_threads=2)).batch(3, drop_remainder=True), 3
    ),
    "rebatch": lambda: grain.experimental.RebatchIterDataset(
        r().batch(2).to_iter_dataset(), 4, drop_remainder=True
    ),
    "iter_zip_mix": lambda: grain.IterDataset.mix(
        [grain.experimental.ZipIterDataset([r().to_iter_dataset()] * 2)] * 2
    ),
    "flat_map": lambda: grain.experimental.FlatMapIterDataset(
        r().to_iter_dataset(), _Repeat2WithSpec()
    ),
    "thread_prefetch": lambda: grain.experimental.ThreadPrefetchIterDataset(
        r().to_iter_dataset(), prefetch_buffer_size=2
    ),
}


class _Plus(grain.transforms.Map):
    def map(self, x):
        return {"x": np.full(2, x, np.float32)}

    def output_spec(self, spec):
        return {"x": ShapeDtypeStruct((2,), np.float32)}


@pytest.mark.parametrize("name", sorted(_KERNEL_PIPELINES))
def test_every_kernel_stage_gives_a_spec_its_elements_fit(name):
    assert testing.check_element_spec(_KERNEL_PIPELINES[name], required=True)


def test_the_kit_catches_a_wrong_spec():
    class Wrong(grain.transforms.Map):
        def map(self, x):
            return x

        def output_spec(self, spec):
            return ShapeDtypeStruct((2,), np.float32)

    with pytest.raises(AssertionError, match="does not fit its element spec"):
        testing.check_element_spec(lambda: r().map(Wrong()))
    with pytest.raises(AssertionError, match="gives no element spec"):
        testing.check_element_spec(lambda: grain.MapDataset.source([1, 2]), required=True)
    assert testing.check_element_spec(lambda: grain.MapDataset.source([1, 2])) is False
