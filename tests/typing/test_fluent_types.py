"""The fluent methods of ``MapDataset`` / ``IterDataset`` have precise types, checked twice.

mypy checks this file (``mypy.ini`` lists it; ``nox -s typecheck``): every ``assert_type`` below is
the type a user's type checker sees. pytest runs it too, so each pipeline is also built and read,
and the stage each method built is the one ``grain_core.dataset`` wires in (``base.builders``).
"""

from __future__ import annotations

from typing import Any, assert_type

import numpy as np
import pytest

import grain_core as grain
from grain_core.dataset import base, map_ops
from grain_core.dataset.iterator import DatasetIterator


class _Double(grain.transforms.Map):
    def map(self, element: Any) -> Any:
        return element * 2


def _words(x: int) -> str:
    return "w" * x


def test_map_dataset_methods_keep_element_types() -> None:
    ds = grain.MapDataset.source([1, 2, 3])
    assert_type(ds, grain.MapDataset[int])
    assert_type(ds.seed(1), grain.MapDataset[int])
    assert_type(ds.shuffle(seed=3), grain.MapDataset[int])
    assert_type(ds.slice(slice(0, 2)), grain.MapDataset[int])
    assert_type(ds.repeat(2), grain.MapDataset[int])
    assert_type(ds.filter(lambda x: x > 1), grain.MapDataset[int])
    words = ds.map(_words)
    assert_type(words, grain.MapDataset[str])
    assert_type(ds.map_with_index(lambda i, x: (i, x)), grain.MapDataset[tuple[int, int]])
    assert_type(ds.random_map(lambda x, rng: float(rng.random()) + x, seed=1), grain.MapDataset[float])
    assert_type(ds.map(_Double()), grain.MapDataset[Any])
    assert_type(ds.batch(2), grain.MapDataset[Any])
    assert_type(ds.batch(2, batch_fn=len), grain.MapDataset[int])
    it = ds.to_iter_dataset()
    assert_type(it, grain.IterDataset[int])
    assert_type(iter(it), DatasetIterator[int])
    assert_type(grain.MapDataset.concatenate([ds, ds]), grain.MapDataset[int])
    assert_type(grain.MapDataset.mix([ds, ds]), grain.MapDataset[int])
    assert list(words) == ["w", "ww", "www"]
    assert list(ds.batch(2, batch_fn=len)) == [2, 1]


def test_iter_dataset_methods_keep_element_types() -> None:
    it = grain.MapDataset.source([1, 2, 3]).to_iter_dataset()
    assert_type(it.seed(1), grain.IterDataset[int])
    assert_type(it.filter(lambda x: x != 2), grain.IterDataset[int])
    words = it.map(_words)
    assert_type(words, grain.IterDataset[str])
    assert_type(it.map_with_index(lambda i, x: i + x), grain.IterDataset[int])
    assert_type(it.random_map(lambda x, rng: np.float64(x)), grain.IterDataset[np.float64])
    assert_type(it.map(_Double()), grain.IterDataset[Any])
    assert_type(it.batch(2), grain.IterDataset[Any])
    assert_type(it.batch(2, batch_fn=lambda xs: sum(xs)), grain.IterDataset[int])
    assert_type(it.mp_prefetch(), grain.IterDataset[int])
    assert_type(grain.IterDataset.mix([it, it]), grain.IterDataset[int])
    assert list(words) == ["w", "ww", "www"]


@pytest.mark.parametrize(
    ("build", "stage"),
    [
        (lambda ds: ds.map(_words), "MapMapDataset"),
        (lambda ds: ds.filter(bool), "FilterMapDataset"),
        (lambda ds: ds.batch(2), "BatchMapDataset"),
        (lambda ds: ds.shuffle(seed=1), "ShuffleMapDataset"),
        (lambda ds: ds.to_iter_dataset(), "PrefetchIterDataset"),
        (lambda ds: ds.to_iter_dataset().map(_words), "MapIterDataset"),
    ],
)
def test_each_method_builds_the_stage_its_table_names(build: Any, stage: str) -> None:
    built = build(grain.MapDataset.source([1, 2, 3]))
    assert type(built) is getattr(base.builders, stage)
    assert type(built).__name__ == stage


def test_the_table_refuses_undeclared_builders_and_names_the_fix() -> None:
    with pytest.raises(AttributeError, match="declares no builder 'MapMapDatset'"):
        base.builders.MapMapDatset = map_ops.MapMapDataset  # type: ignore[attr-defined]
    table = base.StageBuilders()
    with pytest.raises(RuntimeError, match="import grain_core"):
        table.MapMapDataset  # noqa: B018
    assert base.builders.filled() == frozenset(
        n for k in type(base.builders).__mro__ for n in vars(k).get("__annotations__", {})
    )
