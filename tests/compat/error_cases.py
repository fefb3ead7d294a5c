"""Public-API errors users match on: ``(code, regex)`` pairs, each regex Grain's own.

Most regexes are ported from google grain's unit tests (``assertRaisesRegex`` in
``grain/_src/python/**/*_test.py``; the test is named in the comment); the rest are the leading
phrase of the message Grain 0.2.18 raises. ``record_grain_errors.py`` ran every case under Grain
into ``data/grain_0_2_18_errors.json`` (type and message); ``test_grain_error_messages.py`` runs it
under grain_core. Each ``code`` is Python source with ``grain`` and ``np`` bound; it must raise.
"""

from __future__ import annotations

_R = "grain.MapDataset.range"
_SAMPLER = "grain.samplers.IndexSampler(3, num_epochs=1)"
_ZIP = "list(grain.experimental.ZipIterDataset([{}], strict=True))"
_ITER_SOURCE = (
    "import itertools\n"
    "class It(grain.DatasetIterator):\n"
    "    def __init__(self):\n        super().__init__()\n        self.i = 0\n"
    "    def __next__(self):\n        self.i += 1\n        return self.i\n"
    "    def get_state(self):\n        return {'i': self.i}\n"
    "    def set_state(self, s):\n        self.i = s['i']\n"
    "class Src(grain.IterDataset):\n    def __iter__(self):\n        return It()\n"
)

ERROR_CASES: list[tuple[str, str]] = [
    # batch_test.py: test_batch_with_different_structures_fails (and the IterDataset twin)
    ("list(grain.MapDataset.source([{'a': 1}, {'b': 2}]).batch(2))",
     "Expected all input elements to have the same structure but got:"),
    ("list(grain.MapDataset.source([{'a': 1}, {'b': 2}]).to_iter_dataset().batch(2))",
     "Expected all input elements to have the same structure but got:"),
    (f"{_R}(5).batch(0)", "batch_size must be positive"),
    (f"{_R}(5).to_iter_dataset().batch(-2)", "batch_size must be positive"),
    (f"{_R}(5).repeat(0)", "num_epochs must be positive"),
    # slice_test.py: test_slice_with_non_slice_fails
    (f"{_R}(5).slice(3)", "sl is not a slice: <class '"),
    (f"{_R}(5).shuffle(seed=-1)", r"Seed must be an integer between 0 and 2\*\*32-1 \(got seed=-1\)"),
    (f"{_R}(5).shuffle(seed=2**32)", r"Seed must be an integer between 0 and 2\*\*32-1"),
    # mix_test.py: test_mix_with_empty_datasets_fails
    (f"grain.MapDataset.mix([{_R}(0), {_R}(3), {_R}(0)])",
     r"All datasets must have positive length for mixing, but dataset\(s\) at index 0 \(.*\), "
     r"index 2 \(.*\) have length 0"),
    (f"grain.MapDataset.mix([{_R}(3), {_R}(3)], [1, 0])", "Must specify all non-zero proportions for mixing."),
    (f"grain.IterDataset.mix([{_R}(3).to_iter_dataset(), {_R}(3).to_iter_dataset()], [0, 2])",
     "Must specify all non-zero proportions for mixing."),
    # mix_test.py: test_concatenate_infinite_fails
    (f"grain.MapDataset.concatenate([{_R}(3).repeat(), {_R}(3)])", "Cannot concatenate infinite datasets"),
    # prefetch_test.py: test_set_state_out_of_range_fails
    (f"it = iter({_R}(20).to_iter_dataset())\nit.set_state({{'next_index': 21}})",
     "Checkpoint `next_index` 21 is out of range for dataset of length 20."),
    # options_test.py
    ("grain.ReadOptions(num_threads=-1)", "num_threads must be non-negative"),
    ("grain.ReadOptions(prefetch_buffer_size=-1)", "prefetch_buffer_size must be non-negative"),
    # process_prefetch_test.py: test_fails_with_zero_buffer_size
    (f"list({_R}(3).to_iter_dataset().mp_prefetch("
     "grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=0)))",
     "`buffer_size` must be greater than 0"),
    # prefetch_test.py: test_fails_with_negative_prefetch_buffer_size
    (f"grain.experimental.ThreadPrefetchIterDataset({_R}(3).to_iter_dataset(), prefetch_buffer_size=-1)",
     "`prefetch_buffer_size` must be greater than or equal to 0"),
    # prefetch_test.py: test_fails_with_iter_source_multiple_workers
    (_ITER_SOURCE + "list(itertools.islice(grain.experimental.multithread_prefetch("
     "Src().map(lambda x: x + 1), num_threads=2, buffer_size=1), 3))",
     "Cannot slice `IterDataset` source."),
    # packing_concat_then_split_test.py: test_element_with_other_features_fails
    ("list(grain.experimental.ConcatThenSplitIterDataset(grain.MapDataset.source("
     "[{'a': np.arange(3), 'b': np.arange(2)}]).to_iter_dataset(), length_struct={'a': 4}))",
     "Parent element has structure"),
    # filter_test.py / interleave_test.py: the filter raise threshold
    (f"list(grain.experimental.WithOptionsIterDataset({_R}(5000).to_iter_dataset().filter(lambda x: False), "
     "grain.experimental.DatasetOptions(filter_raise_threshold_ratio=0.5)))",
     r"Transformation .* skipped 100\.00 % of the last seen \d+ elements"),
    ("grain.samplers.IndexSampler(num_records=0)", "Invalid number of records in Sampler"),
    ("grain.samplers.SequentialSampler(num_records=0)", "Invalid number of records in Sampler"),
    ("grain.samplers.IndexSampler(num_records=10, num_epochs=0)", "Invalid number of epochs in Index Sampler"),
    ("grain.samplers.IndexSampler(num_records=10, shuffle=True)", "Shuffling requires specifying a seed."),
    ("grain.samplers.IndexSampler(num_records=10, num_epochs=1)[10]",
     r"RecordMetadata object index is out of bounds; Got index 10"),
    ("grain.sharding.ShardOptions(shard_index=3, shard_count=2)",
     r"Shard shard_index must be in \[0, shard_count - 1\], shard_count was 2 and shard_index was 3"),
    ("grain.sharding.ShardOptions(shard_index=0, shard_count=0)",
     "Number of shards must be a positive integer but got 0"),
    (f"grain.DataLoader(data_source=[1, 2, 3], sampler={_SAMPLER}, worker_count=-1)",
     "Worker count should be greater than or equal zero"),
    (f"grain.DataLoader(data_source=[1, 2, 3], sampler={_SAMPLER}, operations=[grain.transforms.Batch(0)])",
     "batch_size must be positive"),
    # zip_test.py: test_strict_zip_*
    (_ZIP.format(f"{_R}(3).to_iter_dataset(), {_R}(2).to_iter_dataset()"),
     "ZipIterDataset argument 2 is shorter than argument 1"),
    (_ZIP.format(f"{_R}(3).to_iter_dataset(), {_R}(3).to_iter_dataset(), {_R}(2).to_iter_dataset()"),
     "ZipIterDataset argument 3 is shorter than arguments 1-2"),
    (_ZIP.format(f"{_R}(3).to_iter_dataset(), {_R}(4).to_iter_dataset()"),
     "ZipIterDataset argument 2 is longer than argument 1"),
    # elastic_iterator_test.py: test_filter_fails
    (f"grain.experimental.ElasticIterator({_R}(10).filter(lambda x: x % 2), global_batch_size=2, "
     "shard_options=grain.sharding.NoSharding())",
     "ElasticIterator does not support `filter` transformation."),
    (f"{_R}(0, 5, 0)", r"range\(\) arg 3 must not be zero"),
]
