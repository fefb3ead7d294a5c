"""Grain's "Dataset basics" tutorial (docs/tutorials/dataset_basic_tutorial), as a script.

Same calls in the same order: a shuffled, mapped, batched ``MapDataset`` over a list and over a
custom ``RandomAccessDataSource``, access past ``len`` (the next epoch), ``filter`` leaving ``None``
holes, slicing as sharding, ``to_iter_dataset`` with ``ReadOptions``, and iterator state.
"""

import grain.python as grain
from tutorial_io import done, show

dataset = (
    grain.MapDataset.source([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    .shuffle(seed=10)
    .map(lambda x: x + 1)
    .batch(batch_size=2)
)
show("list_source_first", dataset[0])
show("list_source_all", list(dataset))


class MySource(grain.RandomAccessDataSource):
    def __init__(self):
        self._data = [0, 1, 2, 3, 4, 5, 6, 7]

    def __getitem__(self, idx):
        return self._data[idx]

    def __len__(self):
        return len(self._data)


source = MySource()
dataset = (
    grain.MapDataset.source(source)
    .shuffle(seed=10)
    .map(lambda x: x + 1)
    .batch(batch_size=2)
)
show("custom_source_first", dataset[0])
show("custom_source_all", list(dataset))

# The third element of the second epoch, shuffled differently from the first.
show("second_epoch_third", dataset[len(dataset) + 2])
show("second_epoch_equals_first", dataset[len(dataset) + 2] == dataset[2])

filtered_dataset = dataset.filter(lambda e: (e[0] + e[1]) % 2 == 0)
show("filtered_len", f"Length of this dataset: {len(filtered_dataset)}")
show("filtered_items", [filtered_dataset[i] for i in range(len(filtered_dataset))])

shard_index = 0
shard_count = 2
sharded_dataset = dataset[shard_index::shard_count]
show("sharded_len", len(sharded_dataset))
show("sharded_0", sharded_dataset[0])
show("sharded_1", sharded_dataset[1])

iter_dataset = sharded_dataset.to_iter_dataset(grain.ReadOptions(num_threads=16, prefetch_buffer_size=500))
show("iter_dataset", [element for element in iter_dataset])

dataset_iter = iter(dataset)
show("is_dataset_iterator", isinstance(dataset_iter, grain.DatasetIterator))
show("next_1", next(dataset_iter))
checkpoint = dataset_iter.get_state()
show("checkpoint", checkpoint)
show("next_2", next(dataset_iter))
dataset_iter.set_state(checkpoint)
show("next_after_restore", next(dataset_iter))
done()
