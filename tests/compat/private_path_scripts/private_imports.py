"""Grain's private paths as public projects import them, and Grain-style custom stages.

Each block makes the calls public code makes after ``from grain._src... import ...`` (our own code,
the same call shapes), and custom datasets/iterators that read Grain's private attributes
(``self._parent``, ``self._parents``, ``self._ctx``, ``self._stats``). Run with google grain (the
recorder) or through ``python -m grain_core.compat run``; prints one JSON object.
"""

import dataclasses
import json

import grain
import numpy as np
from grain._src.core import constants, sharding, transforms, tree_lib
from grain._src.python import data_sources, options
from grain._src.python.dataset import base, dataset
from grain._src.python.dataset import stats as dataset_stats
from grain._src.python.dataset.transformations import batch as batch_ds
from grain._src.python.dataset.transformations.flatmap import FlatMapIterDataset
from grain._src.python.dataset.transformations.source import RangeMapDataset
from grain._src.python.dataset.transformations.zip import ZipIterDataset
from grain._src.python.experimental.index_shuffle.python import (
    index_shuffle_module as index_shuffle,
)


def plain(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in sorted(x.items())}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def find_iterator(it, cls):
    """The first iterator of type ``cls`` in ``it``'s tree (through ``_parents``)."""
    if isinstance(it, cls):
        return it
    for parent in it._parents:
        found = find_iterator(parent, cls)
        if found is not None:
            return found
    return None


def after_restore(ds, k):
    """Elements after the k-th, from a fresh iterator restored to the state after k."""
    it = iter(ds)
    for _ in range(k):
        next(it)
    state = it.get_state()
    rest = list(it)
    it2 = iter(ds)
    it2.set_state(state)
    return {"rest": plain(rest), "restored": plain(list(it2))}


# --- custom stages written the Grain way -------------------------------------------------------


class EpisodeSteps(dataset.MapDataset):
    """A MapDataset subclass: super().__init__(parent), then self._parent."""

    def __init__(self, parent, width):
        super().__init__(parent)
        self._width = width

    def __len__(self):
        return len(self._parent) - self._width + 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return [self._parent[index + j] for j in range(self._width)]


class RepeatByWeight(dataset.MapDataset):
    """Element i of the parent appears weights[i] times; bulk reads through Grain's _getitems."""

    def __init__(self, parent, weights):
        super().__init__(parent)
        self._cum = np.cumsum(weights)
        self._bulk_calls = 0

    def __len__(self):
        return int(self._cum[-1])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        with self._stats.record_self_time():
            epoch, i = divmod(index, len(self))
            parent_index = int(np.searchsorted(self._cum, i, side="right"))
        return self._parent[parent_index + epoch * len(self._parent)]

    def _getitems(self, indices):
        self._bulk_calls += 1
        with self._stats.record_self_time(num_elements=len(indices)):
            parent_indices = []
            for index in indices:
                epoch, i = divmod(index, len(self))
                parent_indices.append(
                    int(np.searchsorted(self._cum, i, side="right")) + epoch * len(self._parent)
                )
        return self._parent._getitems(parent_indices)


class _PairSumIterator(grain.DatasetIterator):
    """Reads two parents through self._parents; times itself with Grain's stats helpers."""

    def __init__(self, parents):
        super().__init__(parents)
        self._count = 0
        self.seen_ratio = None

    @dataset_stats.record_next_duration_if_output
    def __next__(self):
        timer = dataset_stats.Timer()
        if self.seen_ratio is None:  # the options of the pipeline, seen from inside
            self.seen_ratio = self._ctx.dataset_options.filter_raise_threshold_ratio
        a = next(self._parents[0])
        b = next(self._parents[1])
        with self._stats.record_self_time(offset_ns=timer.value()):
            self._count += 1
            return self._stats.record_output_spec(a + b)

    def get_state(self):
        return {"count": self._count, "left": self._parents[0].get_state(),
                "right": self._parents[1].get_state()}

    def set_state(self, state):
        self._count = state["count"]
        self._parents[0].set_state(state["left"])
        self._parents[1].set_state(state["right"])


class PairSum(grain.IterDataset):
    def __init__(self, left, right):
        super().__init__([left, right])

    def __iter__(self):
        return _PairSumIterator([p.__iter__() for p in self._parents])


class _EveryOtherIterator(grain.DatasetIterator):
    def __init__(self, parent):
        super().__init__(parent)

    def __next__(self):
        value = next(self._parent)
        next(self._parent, None)
        return value

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)


class EveryOther(grain.IterDataset):
    def __init__(self, parent):
        super().__init__(parent)

    def __iter__(self):
        return _EveryOtherIterator(self._parent.__iter__())


class Squares(base.RandomAccessDataSource):
    def __len__(self):
        return 6

    def __getitem__(self, index):
        return index * index


class Split(transforms.FlatMap):
    max_fan_out = 3

    def flat_map(self, element):
        return [element * 10 + j for j in range(element % 3 + 1)]


@dataclasses.dataclass
class EvenOdd(base.DatasetSelectionMap):
    n: int

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return index % 2, index // 2


def main() -> dict:
    out: dict = {}
    out["constants"] = [constants.INDEX, constants.RECORD_KEY, constants.DATASET_INDEX,
                        constants.EPOCH, constants.SEED, constants.RECORD, sorted(constants.META_FEATURES)]
    nested = {"a": 1, "b": (2, [3])}
    out["tree"] = plain(tree_lib.map_structure(lambda x: x * 2, nested))
    out["tree_flat"] = plain(tree_lib.flatten(nested))
    out["tree_unflatten"] = plain(tree_lib.unflatten_as(nested, [7, 8, 9]))
    out["tree_with_path"] = [
        [[getattr(key, "key", getattr(key, "idx", key)) for key in path], plain(value)]
        for path, value in tree_lib.flatten_with_path(nested)
    ]
    tree_lib.assert_same_structure(nested, {"a": 0, "b": (0, [0])})
    out["tree_up_to"] = plain(
        tree_lib.map_structure_up_to(
            {"a": 0, "b": (0, 0)}, lambda x: [x, "seen"], {"a": [1, 2], "b": ({"c": 3}, 4, 5)}
        )
    )
    out["even_split"] = [
        [list(sharding.even_split(n, sharding.ShardOptions(i, c, drop_remainder=d)))
         for i in range(c)]
        for n in (0, 7, 10, 12) for c in (1, 3, 4) for d in (False, True)
    ]
    keep = Squares()
    ref = dataset_stats.HashableWeakRef(keep)
    out["weakref"] = [ref() is keep, ref == dataset_stats.HashableWeakRef(keep), hash(ref) == id(keep),
                      ref == keep, len({ref, dataset_stats.HashableWeakRef(keep)})]
    rng = RangeMapDataset(3, 20, 4)
    out["range_map_dataset"] = {
        "attrs": [rng.start, rng.stop, rng.step, len(rng), len(RangeMapDataset(5))],
        "items": [rng[i] for i in range(7)],
        "str": str(rng),
        "shuffled": plain(list(rng.shuffle(seed=1).map(lambda x: x + 1))),
        "is_map_dataset": isinstance(rng, grain.MapDataset),
        "iter": plain(list(RangeMapDataset(6).to_iter_dataset().batch(4))),
        "sliced": list(RangeMapDataset(10)[2:9:3]),
    }
    out["index_shuffle"] = [
        index_shuffle.index_shuffle(i, max_index=9, seed=42, rounds=4) for i in range(10)
    ]
    out["range_source"] = list(grain.MapDataset.source(data_sources.RangeDataSource(0, 10, 3)))
    squares = grain.MapDataset.source(Squares())
    out["custom_source"] = plain(list(squares.shuffle(seed=7)))
    loader = grain.DataLoader(
        data_source=Squares(),
        sampler=grain.samplers.IndexSampler(
            6, shard_options=sharding.ShardOptions(shard_index=1, shard_count=2), num_epochs=1
        ),
        worker_count=0,
    )
    out["sharded_loader"] = plain(list(loader))
    read = options.ReadOptions(num_threads=2, prefetch_buffer_size=4)
    out["read_options"] = plain(list(grain.MapDataset.range(5).to_iter_dataset(read)))

    left = grain.MapDataset.range(6).to_iter_dataset()
    right = grain.MapDataset.range(100, 106).to_iter_dataset()
    out["zip"] = plain(list(ZipIterDataset([left, right])))
    out["zip_restore"] = after_restore(ZipIterDataset([left, right]), 2)
    flat = FlatMapIterDataset(grain.MapDataset.range(5).to_iter_dataset(), Split())
    out["flatmap"] = plain(list(flat))
    out["flatmap_restore"] = after_restore(flat, 4)
    out["make_batch"] = plain(batch_ds.make_batch([{"x": np.int64(1)}, {"x": np.int64(2)}]))
    mixed = grain.MapDataset.select_from_datasets(
        [grain.MapDataset.range(5), grain.MapDataset.range(10, 15)], EvenOdd(8)
    )
    out["selection_map"] = plain(list(mixed))

    steps = EpisodeSteps(grain.MapDataset.range(6).map(lambda x: x + 1), width=3)
    out["custom_map_dataset"] = {"len": len(steps), "items": plain(list(steps)),
                                 "third": plain(steps[2]), "shuffled": plain(list(steps.shuffle(seed=3)))}
    pair = PairSum(grain.MapDataset.range(5).to_iter_dataset(),
                   grain.MapDataset.range(10, 15).to_iter_dataset())
    opts = base.DatasetOptions(filter_raise_threshold_ratio=0.5)
    with_opts = grain.experimental.WithOptionsIterDataset(pair, opts)
    it = iter(with_opts)
    out["custom_iter"] = {"elements": plain(list(it))}
    out["custom_iter"]["ratio_seen"] = find_iterator(it, _PairSumIterator).seen_ratio
    out["custom_iter_restore"] = after_restore(pair.map(lambda x: x * 2).batch(2), 1)
    every = EveryOther(grain.MapDataset.range(9).to_iter_dataset())
    weighted = RepeatByWeight(grain.MapDataset.range(4).map(lambda x: x * 10), [1, 3, 0, 2])
    out["custom_getitems"] = {
        "items": plain([weighted[i] for i in range(len(weighted))]),
        "bulk": plain(weighted._getitems([5, 0, 3, 7])),
        "iterated": plain(list(weighted.to_iter_dataset())),
        "batched": plain(list(weighted.batch(4))),
        "shuffled": plain(list(weighted.shuffle(seed=5))),
        "bulk_path_used": weighted._bulk_calls > 0,
    }
    out["every_other"] = plain(list(every))
    out["every_other_restore"] = after_restore(every, 2)
    return out


if __name__ == "__main__":
    print(json.dumps(main(), sort_keys=True))
