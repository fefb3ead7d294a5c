"""Grain's data-source tutorials (docs/tutorials/data_sources/: ArrayRecord and Parquet), as a script.

ArrayRecord: records written with ``ArrayRecordWriter`` (pickled dicts), read with
``grain.sources.ArrayRecordDataSource``, parsed and tokenized by a ``grain.transforms.Map``, then
``MapDataset.source(...).shuffle(seed=42).map(...).batch(10)`` and read at index 100 (past the
first epoch). Parquet: ``grain.experimental.ParquetIterDataset`` on one file, with a ``ParquetFile``
keyword, on a list of files, under ``ThreadPrefetchIterDataset``, then a tokenizing map.

Stand-ins: the tutorial converts TFDS ``bool_q`` (downloaded); here 40 question/answer dicts are
generated. The HuggingFace ``bert-base-cased`` tokenizer (downloaded) becomes a whitespace
tokenizer with the same ``encode(text).tokens`` interface.
"""

import pickle

import grain
import pyarrow as pa
import pyarrow.parquet as pq
from array_record.python import array_record_module
from tutorial_io import done, show


class _Encoding:
    def __init__(self, tokens):
        self.tokens = tokens


class WhitespaceTokenizer:
    def encode(self, text):
        return _Encoding(text.replace(",", " ,").replace(".", " .").split())


class ParseAndTokenizeText(grain.transforms.Map):
    """Unpickles a record and returns the first 10 tokens of one of its text features."""

    def __init__(self, tokenizer, feature_name):
        self._tokenizer = tokenizer
        self._feature_name = feature_name

    def map(self, element: bytes) -> list[str]:
        parsed_element = pickle.loads(element)
        return self._tokenizer.encode(parsed_element[self._feature_name].decode("utf-8")).tokens[:10]


class TokenizeText(grain.transforms.Map):
    """Tokenizes every text value of a row."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def map(self, element):
        return [self._tokenizer.encode(item).tokens for item in element.values()]


WORDS = "is the river longer than the mountain in the old town of the north valley near".split()

# ArrayRecord tutorial
example_file_path = "./test.array_record"
writer = array_record_module.ArrayRecordWriter(example_file_path, "group_size:1")
record_count = 0
for i in range(40):
    question = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(12)) + f" number {i}"
    record = {"question": question.encode(), "answer": i % 3 == 0, "passage": f"passage {i}.".encode()}
    writer.write(pickle.dumps(record, protocol=4))
    record_count += 1
writer.close()
print(f"Number of records written to array_record file {example_file_path} : {record_count}")

example_array_record_data_source = grain.sources.ArrayRecordDataSource(example_file_path)
show("array_record_len", f"Number of records: {len(example_array_record_data_source)}")
show("array_record_first", pickle.loads(example_array_record_data_source[0]))

tokenizer = WhitespaceTokenizer()
example_datasets = (
    grain.MapDataset.source(example_array_record_data_source)
    .shuffle(seed=42)
    .map(ParseAndTokenizeText(tokenizer, "question"))
    .batch(batch_size=10)
)
show("array_record_batch_100", example_datasets[100])
show("array_record_batch_1", example_datasets[1])

# Parquet tutorial
table = pa.table(
    {
        "email_subject": [
            "Meeting Reminder: Project X Update",
            "Important Announcement Regarding Company Policy",
            "FWD: Quick Question",
            "Your Order Confirmation #12345",
            "Invitation to Team Building Activity",
        ],
        "email_body": [
            "Hi team, see you at the Project X update tomorrow.",
            "Dear employees, a new remote work policy starts in May.",
            "Hi, forwarding you a quick question.",
            "Dear customer, thank you for your order.",
            "Hello everyone, you are invited to a team building afternoon.",
        ],
    }
)
writer = pq.ParquetWriter("emails.parquet", table.schema)
writer.write_table(table)
writer.close()

ds = grain.experimental.ParquetIterDataset("./emails.parquet")
show("parquet_first", list(ds)[0])
ds = grain.experimental.ParquetIterDataset("./emails.parquet", memory_map=True)
show("parquet_first_memory_map", list(ds)[0])
ds = grain.experimental.ParquetIterDataset(["./emails.parquet", "./emails.parquet"])
show("parquet_two_files_subjects", [row["email_subject"] for row in ds])
ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=10)
ds = ds.map(TokenizeText(tokenizer))
ds_iter = iter(ds)
show("parquet_tokenized_first", next(ds_iter))
done()
