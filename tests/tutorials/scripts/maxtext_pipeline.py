"""A MaxText-style input pipeline (MaxText's ``input_pipeline/_grain_data_processing.py``), as a script.

The calls MaxText makes, in its order, on small generated data:

* ArrayRecord mixture: ``"pattern:weight;pattern:weight"`` -> one ``MapDataset.source(
  ArrayRecordDataSource(files))`` per pattern -> ``MapDataset.mix(datasets, weights)`` ->
  ``shuffle(seed)`` -> ``repeat(num_epoch)`` -> ``[host::host_count]`` -> ``to_iter_dataset()``.
* Parquet: ``MapDataset.source(files)`` -> shuffle -> repeat -> shard ->
  ``map(ParquetIterDataset)`` -> ``InterleaveIterDataset(cycle_length=...)`` ->
  ``WindowShuffleIterDataset(window_size, seed)``.
* TFRecord: ``grain.experimental.TFRecordIterDataset`` on a file written here (length + masked CRC32C
  framing), interleaved like the Parquet files.
* Pretraining preprocessing: parse, tokenize-and-trim, rekey to inputs/targets,
  ``FirstFitPackIterDataset(length_struct, num_packing_bins)``, rekey segmentation/position,
  ``batch(batch_size, batch_fn=partial(batch_and_pad, ...))``, shift, ``mp_prefetch`` with worker
  processes; then iterator state saved and restored.
* A ``DataLoader`` with worker processes and a custom sampler (``__getitem__`` -> ``RecordMetadata``).

Stand-ins: MaxText parses ``tf.train.Example`` protos and uses a SentencePiece tokenizer; here
records are JSON and the tokenizer maps each word to a fixed id (sum of its bytes).
"""

import functools
import glob
import json
import os
import struct

import grain.python as grain
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from array_record.python.array_record_module import ArrayRecordWriter
from tutorial_io import done, show

MAX_LEN = 8
PAD_ID = 0
BATCH = 2
HOSTS = 2


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecord(path, records):
    with open(path, "wb") as f:
        for r in records:
            length = struct.pack("<Q", len(r))
            f.write(length + struct.pack("<I", masked_crc32c(length)) + r + struct.pack("<I", masked_crc32c(r)))


def text(corpus, i):
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    n = 1 + (i * 7) % 9  # 1..9 words: some are trimmed to MAX_LEN
    return f"{corpus}{i} " + " ".join(words[(i + k) % len(words)] for k in range(n - 1))


def make_data():
    os.makedirs("web", exist_ok=True)
    os.makedirs("code", exist_ok=True)
    for corpus, files, per_file in [("web", 2, 10), ("code", 1, 8)]:
        for f in range(files):
            w = ArrayRecordWriter(f"{corpus}/part-{f}.array_record", "group_size:1")
            for i in range(per_file):
                w.write(json.dumps({"text": text(corpus, f * per_file + i)}).encode())
            w.close()
    os.makedirs("parquet", exist_ok=True)
    for f in range(4):
        rows = [text("pq", f * 6 + i) for i in range(6)]
        pq.write_table(pa.table({"text": rows}), f"parquet/part-{f}.parquet")
    os.makedirs("tfrecord", exist_ok=True)
    for f in range(2):
        write_tfrecord(f"tfrecord/part-{f}.tfrecord", [text("tf", f * 5 + i).encode() for i in range(5)])


def find_data_files(pattern):
    files = sorted(glob.glob(pattern))
    assert files, pattern
    return files


def get_datasets(pattern, file_type, shuffle, shuffle_seed, num_epoch, host, host_count):
    if file_type == "arrayrecord":
        if ";" in pattern:
            patterns, weights = zip(*[p.split(":") for p in pattern.split(";")])
            weights = [float(w) for w in weights]
            weights = [round(w / sum(weights), 4) for w in weights]
            datasets = [grain.MapDataset.source(grain.ArrayRecordDataSource(find_data_files(p))) for p in patterns]
            dataset = grain.MapDataset.mix(datasets, weights)
        else:
            dataset = grain.MapDataset.source(grain.ArrayRecordDataSource(find_data_files(pattern)))
        if shuffle:
            dataset = dataset.shuffle(seed=shuffle_seed)
        dataset = dataset.repeat(num_epoch)
        dataset = dataset[host::host_count]
        return dataset.to_iter_dataset()
    files = find_data_files(pattern)
    dataset = grain.MapDataset.source(files)
    if shuffle:
        dataset = dataset.shuffle(seed=shuffle_seed)
    dataset = dataset.repeat(num_epoch)
    dataset = dataset[host::host_count]
    reader = grain.experimental.ParquetIterDataset if file_type == "parquet" else grain.experimental.TFRecordIterDataset
    dataset = dataset.map(reader)
    dataset = grain.experimental.InterleaveIterDataset(dataset, cycle_length=len(dataset))
    return grain.experimental.WindowShuffleIterDataset(dataset, window_size=4, seed=shuffle_seed)


class ParseFeatures(grain.MapTransform):
    def map(self, element):
        if isinstance(element, bytes) and element.startswith(b"{"):
            return {"text": json.loads(element)["text"]}
        if isinstance(element, bytes):
            return {"text": element.decode()}
        return {"text": element["text"]}


class TokenizeAndTrim(grain.MapTransform):
    def map(self, element):
        ids = [sum(w.encode()) % 1000 + 1 for w in element["text"].split()]
        return {"text": np.asarray(ids[:MAX_LEN], dtype=np.int32)}


class Rekey(grain.MapTransform):
    def __init__(self, mapping):
        self.mapping = mapping

    def map(self, element):
        return {new: element[old] for new, old in self.mapping.items()} | {
            k: v for k, v in element.items() if k not in self.mapping.values()
        }


class ShiftData(grain.MapTransform):
    def map(self, element):
        inputs = element["inputs"]
        shifted = np.concatenate([np.full_like(inputs[:, :1], PAD_ID), inputs[:, :-1]], axis=1)
        element["inputs"] = shifted
        return element


def pretrain_pipeline(dataset, workers):
    dataset = dataset.map(ParseFeatures())
    dataset = dataset.map(TokenizeAndTrim())
    dataset = dataset.map(Rekey({"inputs": "text", "targets": "text"}))
    length_struct = {"inputs": MAX_LEN, "targets": MAX_LEN}
    dataset = grain.experimental.FirstFitPackIterDataset(dataset, length_struct=length_struct, num_packing_bins=BATCH)
    dataset = dataset.map(
        Rekey(
            {
                "targets_segmentation": "targets_segment_ids",
                "inputs_segmentation": "inputs_segment_ids",
                "targets_position": "targets_positions",
                "inputs_position": "inputs_positions",
            }
        )
    )
    batch_fn = functools.partial(grain.experimental.batch_and_pad, batch_size=BATCH, pad_value=PAD_ID)
    dataset = dataset.batch(BATCH, batch_fn=batch_fn)
    dataset = dataset.map(ShiftData())
    return dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=1))


class EveryOtherSampler:
    """A custom sampler: even record keys first, then odd ones, for one epoch."""

    def __init__(self, num_records):
        self._order = list(range(0, num_records, 2)) + list(range(1, num_records, 2))

    def __getitem__(self, index):
        if index >= len(self._order):
            raise IndexError(index)
        return grain.RecordMetadata(index=index, record_key=self._order[index], rng=None)


class SizedEveryOtherSampler(EveryOtherSampler):
    """The same sampler, also telling its length."""

    def __len__(self):
        return len(self._order)


class ToText(grain.MapTransform):
    def map(self, element):
        return json.loads(element)["text"].split()[0]


def main():
    make_data()
    mixture = "web/*.array_record:3;code/*.array_record:1"
    for host in range(HOSTS):
        ds = get_datasets(mixture, "arrayrecord", True, 7, 1, host, HOSTS)
        show(f"mixture_host{host}", [ParseFeatures().map(r)["text"].split()[0] for r in ds], echo=False)

    ds = pretrain_pipeline(get_datasets(mixture, "arrayrecord", True, 7, 1, 0, HOSTS), workers=2)
    it = iter(ds)
    show("packed_batch_0", next(it))
    show("packed_batch_1", next(it))
    state = it.get_state()
    rest = [b["targets"] for b in it]
    show("packed_rest_targets", rest, echo=False)
    it.set_state(state)
    show("packed_rest_targets_after_restore", [b["targets"] for b in it], echo=False)

    for file_type, pattern in [("parquet", "parquet/*.parquet"), ("tfrecord", "tfrecord/*.tfrecord")]:
        for host in range(HOSTS):
            ds = get_datasets(pattern, file_type, True, 3, 1, host, HOSTS).map(ParseFeatures())
            show(f"{file_type}_host{host}", [r["text"].split()[0] for r in ds], echo=False)
    ds = pretrain_pipeline(get_datasets("parquet/*.parquet", "parquet", True, 3, 1, 0, HOSTS), workers=2)
    show("parquet_packed_targets", [b["targets"] for b in ds], echo=False)

    source = grain.ArrayRecordDataSource(find_data_files("web/*.array_record"))
    # MaxText's earlier DataLoader path: IndexSampler sharded per host, batching operation, workers.
    for host in range(HOSTS):
        loader = grain.DataLoader(
            data_source=source,
            sampler=grain.IndexSampler(
                num_records=len(source),
                shard_options=grain.ShardOptions(shard_index=host, shard_count=HOSTS, drop_remainder=True),
                shuffle=False,
                num_epochs=1,
                seed=0,
            ),
            operations=[ToText(), grain.Batch(batch_size=4, drop_remainder=False)],
            worker_count=2,
        )
        show(f"dataloader_host{host}_batches", [b.tolist() for b in loader], echo=False)
    for name, sampler in [
        ("custom_sized_sampler_loader", SizedEveryOtherSampler(len(source))),
        ("custom_sampler_loader", EveryOtherSampler(len(source))),
    ]:
        loader = grain.DataLoader(
            data_source=source,
            sampler=sampler,
            operations=[ToText()],
            shard_options=grain.ShardOptions(shard_index=0, shard_count=1),
            worker_count=2,
        )
        show(name, list(loader), echo=False)
    done()


# Worker processes re-import this script (spawn): the pipeline runs only in the main process.
if __name__ == "__main__":
    main()
