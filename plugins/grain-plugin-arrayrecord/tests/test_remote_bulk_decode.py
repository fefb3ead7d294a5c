"""The remote reader's bulk paths give exactly what the one-by-one paths give: one-record chunks
decoded in one loop (``riegeli.decode_singles``) and footers parsed in bulk
(``riegeli._footer_fields``), on files written by array_record's writer and compared with its
own reader; damaged chunks leave the bulk path to the general decoder, which names the problem."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
from array_record.python.array_record_module import ArrayRecordWriter
from grain_plugin_arrayrecord import ArrayRecordDataSource, RecordReadError, remote, riegeli
from test_remote import _reference

from grain_core.testing.servers import RangeHTTPServer

pytestmark = pytest.mark.timeout(180)

# One record per chunk; sizes that make chunks cross 64 KiB block boundaries now and then.
OPTIONS = [
    "group_size:1",
    "group_size:1,uncompressed",
    "group_size:1,snappy",
    "group_size:1,brotli",
]


@pytest.fixture(params=["native", "python"], autouse=True)
def decoder(request, monkeypatch):
    """Every test here runs with ``decode_singles`` in C (where the accelerator is built) and with
    its Python loop (highwayhash-cffi and zstandard)."""
    if request.param == "native":
        if not riegeli.NATIVE_DECODE:
            pytest.skip("the C accelerator is not built (test_riegeli_native says why)")
    else:
        monkeypatch.setattr(riegeli, "NATIVE_DECODE", False)
    return request.param


def _write(path, option: str, n: int = 300) -> None:
    rng = np.random.default_rng(len(option))
    w = ArrayRecordWriter(str(path), option)
    for k in range(n):
        size = int(rng.choice([0, 1, 200, 1000, 5000, 20_000]))  # 1-, 2- and 3-byte varints
        w.write(rng.bytes(size) if k % 3 else bytes([k % 256]) * size)
    w.close()


def _spans(path) -> tuple[riegeli.FileIndex, list[int], list[int]]:
    idx = remote.RemoteReader(fsspec.filesystem("file"), str(path)).index()
    offsets = idx.chunk_offsets.tolist()
    return idx, offsets[:-1], offsets[1:]


@pytest.mark.parametrize("option", OPTIONS)
def test_single_record_chunks_decode_in_bulk_like_array_record(tmp_path, option):
    path = tmp_path / "f.array_record"
    _write(path, option)
    expected = _reference(path)
    _, begins, ends = _spans(path)
    data = path.read_bytes()
    base = begins[0]
    got = riegeli.decode_singles(data[base:], base, begins, ends)
    crossing = [
        b // riegeli.BLOCK_SIZE != (e - 1) // riegeli.BLOCK_SIZE for b, e in zip(begins, ends)
    ]
    if "snappy" in option or "brotli" in option:  # other codecs: the general decoder
        assert got == [None] * len(begins)
    else:  # every chunk is decoded here (those a block header interrupts too), and right
        assert got == expected and any(crossing)
        if riegeli.NATIVE_DECODE:  # in C, those a block header interrupts too
            records, left = riegeli._native.decode_singles(
                data[base:], base, begins, ends, riegeli._HASH_KEY
            )
            assert records == expected and left == []
    assert all(g is None or g == e for g, e in zip(got, expected))
    # Through the reader (bulk where it applies, one by one elsewhere): array_record's records.
    src = ArrayRecordDataSource(str(path).replace(str(tmp_path), "memory://bulk_decode", 1))
    mem = fsspec.filesystem("memory")
    mem.pipe("/bulk_decode/f.array_record", data)
    try:
        order = np.random.default_rng(0).permutation(len(expected)).tolist()
        assert src.__getitems__(order) == [expected[i] for i in order]
    finally:
        mem.rm("/bulk_decode/f.array_record")
        remote.clear_caches()


def test_without_hashes_nothing_is_decoded_in_bulk_and_records_are_the_same(tmp_path, monkeypatch):
    path = tmp_path / "f.array_record"
    _write(path, "group_size:1")
    _, begins, ends = _spans(path)
    monkeypatch.setattr(riegeli, "_hash", None)
    assert riegeli.decode_singles(path.read_bytes(), 0, begins, ends) == [None] * len(begins)
    reader = remote.RemoteReader(fsspec.filesystem("file"), str(path))
    assert reader.read(list(range(len(begins)))[::-1]) == _reference(path)[::-1]


@pytest.mark.parametrize("crossing", [False, True])
@pytest.mark.parametrize("where", ["header", "data"])
def test_a_damaged_single_record_chunk_is_named_by_the_general_decoder(tmp_path, where, crossing):
    """A flipped byte in a chunk's header or data (in a chunk inside one block, or in one that a
    block header interrupts, after that header) is an error naming the file and the chunk."""
    path = tmp_path / "clean.array_record"
    _write(path, "group_size:1,uncompressed")
    _, begins, ends = _spans(path)
    block = riegeli.BLOCK_SIZE
    c = next(
        k
        for k, (b, e) in enumerate(zip(begins, ends))
        if e - b > 300
        and (b // block != (e - 1) // block) == crossing
        and (not crossing or b % block < block - 300)  # header and byte 200 before the boundary
    )
    raw = bytearray(path.read_bytes())
    raw[begins[c] + (20 if where == "header" else 200)] ^= 0x01
    got = riegeli.decode_singles(bytes(raw), 0, begins, ends)
    assert got[c] is None and got[c - 1] is not None and got[c + 1] is not None
    name = f"bad_{where}.array_record"
    (tmp_path / name).write_bytes(bytes(raw))
    with RangeHTTPServer(tmp_path) as server:
        src = ArrayRecordDataSource(f"{server.url}/{name}")
        assert src.__getitems__([c - 1, c + 1]) == [
            _reference(path)[c - 1],
            _reference(path)[c + 1],
        ]
        with pytest.raises(RecordReadError, match=f"{name}.*byte offset {begins[c]}") as info:
            src.__getitems__([c + 1, c, 0])
        assert "hash does not match" in str(info.value) and info.value.record == c
    remote.clear_caches()


@pytest.mark.parametrize("option", ["group_size:1", "group_size:4,uncompressed"])
def test_a_damaged_block_header_inside_a_chunk_is_named_as_array_records_reader_does(
    tmp_path, option
):
    """A flipped byte in the 24-byte block header that interrupts a chunk: array_record's reader
    fails on it ("block header hash mismatch"), and so does the remote reader, naming the file
    and the header's offset; records of other chunks still read."""
    path = tmp_path / "clean.array_record"
    _write(path, option, n=600)
    idx, begins, ends = _spans(path)
    block = riegeli.BLOCK_SIZE
    c = next(k for k, (b, e) in enumerate(zip(begins, ends)) if b // block != (e - 1) // block)
    boundary = (ends[c] - 1) // block * block
    raw = bytearray(path.read_bytes())
    raw[boundary + 12] ^= 0x01  # inside the header's 16 hashed bytes
    name = "bad_block.array_record"
    (tmp_path / name).write_bytes(bytes(raw))
    with pytest.raises(Exception, match="block header hash mismatch"):
        _reference(tmp_path / name)
    first = int(idx.record_starts[c])  # the damaged chunk's first record
    other = int(idx.record_starts[c + 1])  # the next chunk's
    with RangeHTTPServer(tmp_path) as server:
        src = ArrayRecordDataSource(f"{server.url}/{name}")
        assert src.__getitems__([other, 0]) == [_reference(path)[other], _reference(path)[0]]
        with pytest.raises(RecordReadError, match=f"{name}.*byte offset {boundary}") as info:
            src.__getitems__([other, first])
        assert "block header's hash does not match" in str(info.value)
        assert info.value.record == first
    remote.clear_caches()


def test_footers_parse_in_bulk_like_record_by_record(tmp_path):
    path = tmp_path / "f.array_record"
    _write(path, "group_size:3,zstd", n=500)
    idx = remote.RemoteReader(fsspec.filesystem("file"), str(path)).index()
    data = path.read_bytes()
    footer = int(idx.chunk_offsets[-1])
    chunk = riegeli.decode_chunk(memoryview(data)[footer:], footer, "f")
    bulk = riegeli._footer_fields(chunk.values, chunk.ends)
    assert bulk is not None
    slow = [riegeli._proto_uints(chunk.record(c), "f", 0) for c in range(1, len(chunk.ends))]
    assert bulk[0].tolist() == [f.get(1, 0) for f in slow] == idx.chunk_offsets[:-1].tolist()
    assert bulk[1].tolist() == [f.get(3, 0) for f in slow]
    assert idx.num_records == 500 and idx.record_starts[1] == 3


def _records_of(*messages: bytes) -> tuple[bytes, list[int]]:
    values = b"meta" + b"".join(messages)
    return values, np.cumsum([4, *map(len, messages)]).tolist()


def test_footer_records_the_bulk_parse_does_not_take_go_record_by_record():
    # Plain varint fields, a repeated field (the last wins) and an empty record: parsed in bulk.
    values, ends = _records_of(
        b"\x08\x05\x18\x02", b"\x08\x81\x01\x10\x07\x18\x03\x08\x90\x01", b""
    )
    offsets, counts = riegeli._footer_fields(values, ends)
    assert offsets.tolist() == [5, 144, 0] and counts.tolist() == [2, 3, 0]
    # A length-delimited field, a key without its value, a varint running into the next record:
    # not for the bulk parse (``parse_footer`` then goes record by record and names the problem).
    for messages in (
        [b"\x08\x05\x12\x01x"],
        [b"\x08\x05\x18", b"\x02\x08"],
        [b"\x08\x85", b"\x01"],
    ):
        assert riegeli._footer_fields(*_records_of(*messages)) is None
