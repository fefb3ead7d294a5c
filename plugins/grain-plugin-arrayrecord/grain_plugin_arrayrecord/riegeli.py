"""Decoding the ArrayRecord file format (Riegeli/records with an ArrayRecord footer), from bytes.

Written from the public format descriptions (Riegeli's ``records_format`` document and ArrayRecord's
``layout.proto``); nothing here does I/O, so the remote reader (``remote.py``) decides which byte
ranges to fetch and this module turns them into records.

The layout, briefly:

* the file is cut into 64 KiB blocks; a 24-byte *block header* sits at every multiple of 64 KiB and
  interrupts whatever chunk crosses it (they are skipped when reading a chunk);
* a *chunk* is a 40-byte header (``header_hash``, ``data_size``, ``data_hash``, ``chunk_type`` (1
  byte), ``num_records`` (7 bytes), ``decoded_data_size``, all little-endian) and ``data_size`` bytes
  of data, then padding;
* ArrayRecord writes one *simple chunk* (type ``'r'``) per group of records: a compression byte,
  the varint size of the compressed record sizes, the compressed sizes (one varint per record) and
  the compressed concatenated values. Compression 0 is none; ``'z'`` zstd, ``'b'`` brotli and
  ``'s'`` snappy buffers start with their decompressed size as a varint;
* after the data chunks comes a *footer* chunk: record 0 a ``RiegeliFooterMetadata`` proto, then one
  ``ArrayRecordFooter`` proto (``chunk_offset``, ``decoded_data_size``, ``num_records``) per chunk;
* the last 64 KiB block holds the *postscript* chunk: three copies of a ``RiegeliPostscript`` proto
  (``footer_offset``, ``magic``).

Every size, count, offset and the postscript's magic are checked, and so are each chunk's two
hashes (``header_hash`` over the 32 header bytes after it, ``data_hash`` over the chunk's data: 64-bit
HighwayHash keyed with ``"Riegeli/records\n"`` twice, as Riegeli writes them) when HighwayHash is
available (the plugin's C accelerator ``_riegeli_native``, built when the plugin is installed where
a C compiler and the Python headers are present, else the ``highwayhash-cffi`` package, module
``highwayhash``; :data:`VERIFIES_HASHES` says whether it is): a truncated or damaged file is an ``ArrayRecordFormatError`` naming the file and the
byte offset. The hashes of the block headers inside the chunks decoded are checked too (those in
holes read between wanted chunks are skipped unread, as a reader going from chunk to chunk would
not meet them).
"""

from __future__ import annotations

import dataclasses
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import zstandard  # imported with the module: array_record's default compression (~20 ms to import)

BLOCK_SIZE = 1 << 16
BLOCK_HEADER_SIZE = 24
CHUNK_HEADER_SIZE = 40
POSTSCRIPT_MAGIC = 0x71930E704FDAE05E  # RiegeliPostscript.magic as array_record writes it
CHUNK_SIMPLE = ord("r")
CHUNK_TRANSPOSED = ord("t")
_HEADER = struct.Struct("<QQQQQ")
_HASH_KEY = b"Riegeli/records\n" * 2  # HighwayHash key: Riegeli's, as 4 little-endian uint64s

try:  # the plugin's C accelerator (_riegeli_native.c), built where a C compiler was present
    from grain_plugin_arrayrecord import _riegeli_native as _native
except ImportError:  # pragma: no cover - exercised where the extension is not built
    _native = None
try:  # highwayhash-cffi: HighwayHash's reference C code
    from highwayhash import highwayhash_64 as _highwayhash_64
except ImportError:  # pragma: no cover - exercised where the package is not installed
    _highwayhash_64 = None
try:  # its cffi module, called directly with a key built once (the wrapper builds one per call)
    from highwayhash._highwayhash import ffi as _hh_ffi
    from highwayhash._highwayhash import lib as _hh_lib

    _HH_KEY = _hh_ffi.new("uint64_t[4]", list(struct.unpack("<4Q", _HASH_KEY)))
except ImportError:  # pragma: no cover
    _hh_lib = None


def _pick_hash() -> Callable[[bytes | bytearray | memoryview], int] | None:
    if _native is not None:
        native = _native.highwayhash64
        return lambda data: native(data, _HASH_KEY)
    if _hh_lib is not None:
        return lambda data: int(_hh_lib.HighwayHash64(_hh_ffi.from_buffer(data), len(data), _HH_KEY))
    if _highwayhash_64 is not None:
        return lambda data: int.from_bytes(_highwayhash_64(_HASH_KEY, bytes(data)), sys.byteorder)
    return None


#: Riegeli's HighwayHash as computed here: the accelerator's, else highwayhash-cffi's; None
#: without either (hashes are then not checked).
_hash = _pick_hash()
#: Whether chunk hashes are verified (the plugin's C accelerator is built, or the ``highwayhash``
#: module of ``highwayhash-cffi`` imports).
VERIFIES_HASHES = _hash is not None
#: Whether :func:`decode_singles` runs in C (the accelerator is built and found the system's
#: libzstd); else it is a Python loop over highwayhash-cffi and ``zstandard``.
NATIVE_DECODE = _native is not None and bool(_native.ZSTD)


def highwayhash64(data: bytes | bytearray | memoryview) -> int:
    """Riegeli's 64-bit HighwayHash of ``data``; needs :data:`VERIFIES_HASHES`."""
    if _hash is None:
        raise RuntimeError(
            "HighwayHash is not available: reinstall grain-plugin-arrayrecord where a C compiler "
            "is present, or pip install highwayhash-cffi"
        )
    return _hash(data)


class ArrayRecordFormatError(ValueError):
    """Bytes that are not a valid ArrayRecord file (truncated, damaged or of another format).
    ``path`` names the file and ``offset`` the byte position where decoding failed."""

    def __init__(self, message: str, path: str, offset: int):
        super().__init__(
            f"ArrayRecord file {path!r}, byte offset {offset}: {message}. The file is corrupted, "
            "truncated or not an ArrayRecord file; re-create or re-copy it."
        )
        self.path, self.offset = path, offset

    def __reduce__(self):
        return (_rebuild, (str(self), self.path, self.offset))


def _rebuild(message: str, path: str, offset: int) -> ArrayRecordFormatError:
    err = ArrayRecordFormatError.__new__(ArrayRecordFormatError)
    ValueError.__init__(err, message)
    err.path, err.offset = path, offset
    return err


@dataclasses.dataclass(frozen=True)
class FileIndex:
    """Where a file's records are: chunk ``c`` starts at byte ``chunk_offsets[c]`` and ends where
    the next one starts (``chunk_offsets[-1]`` is the footer's offset); it holds records
    ``record_starts[c]`` to ``record_starts[c + 1] - 1``."""

    size: int
    chunk_offsets: np.ndarray  # int64, num_chunks + 1
    record_starts: np.ndarray  # int64, num_chunks + 1

    @property
    def num_records(self) -> int:
        return int(self.record_starts[-1])

    @property
    def nbytes(self) -> int:
        return int(self.chunk_offsets.nbytes + self.record_starts.nbytes)


def strip_block_headers(data: bytes | memoryview, begin: int) -> bytes:
    """The bytes of file range ``[begin, begin + len(data))`` without the block headers in it (a
    range starting inside a block header loses that header's remaining bytes)."""
    end = begin + len(data)
    first = -(-begin // BLOCK_SIZE) * BLOCK_SIZE  # first block boundary >= begin
    if begin % BLOCK_SIZE and begin % BLOCK_SIZE < BLOCK_HEADER_SIZE:
        first = begin - begin % BLOCK_SIZE
    if first >= end:
        return bytes(data)
    mv = memoryview(data)
    parts = []
    pos = begin
    for b in range(first, end, BLOCK_SIZE):
        if b > pos:
            parts.append(mv[pos - begin : b - begin])
        pos = max(pos, min(b + BLOCK_HEADER_SIZE, end))
    parts.append(mv[pos - begin :])
    return b"".join(parts)


def bad_block_header(data: bytes | bytearray | memoryview, begin: int) -> int:
    """The file offset of the first block header in file range ``[begin, begin + len(data))``
    whose hash (HighwayHash of its 16 bytes after the hash, as Riegeli writes it) does not match,
    or -1; -1 too without :data:`VERIFIES_HASHES`. Headers only partly in the range are not
    checked."""
    if _hash is None:
        return -1
    view = memoryview(data)
    first = -(-begin // BLOCK_SIZE) * BLOCK_SIZE  # first block boundary >= begin
    for b in range(first, begin + len(view) - BLOCK_HEADER_SIZE + 1, BLOCK_SIZE):
        at = b - begin
        if highwayhash64(view[at + 8 : at + BLOCK_HEADER_SIZE]) != int.from_bytes(
            view[at : at + 8], "little"
        ):
            return b
    return -1


def read_varint(
    buf: bytes | bytearray | memoryview, pos: int, path: str, offset: int
) -> tuple[int, int]:
    """``(value, next position)`` of the varint64 at ``buf[pos]``."""
    if pos < len(buf) and buf[pos] < 0x80:  # one byte: the common case (sizes below 128)
        return buf[pos], pos + 1
    value = shift = 0
    for i in range(pos, min(pos + 10, len(buf))):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise ArrayRecordFormatError("a varint runs past its buffer", path, offset + pos)


def varints(buf: bytes | memoryview, count: int, path: str, offset: int) -> np.ndarray:
    """``count`` concatenated varint64s of ``buf`` (vectorised), as int64."""
    b = np.frombuffer(buf, dtype=np.uint8)
    ends = np.flatnonzero(b < 0x80)
    if len(ends) != count or (count and ends[-1] != len(b) - 1):
        raise ArrayRecordFormatError(
            f"expected {count} record sizes, found {len(ends)} in {len(b)} bytes", path, offset
        )
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.concatenate(([0], ends[:-1] + 1))
    if int((ends - starts).max()) >= 10:
        raise ArrayRecordFormatError("a record size is not a valid varint", path, offset)
    pos = np.arange(len(b)) - np.repeat(starts, ends - starts + 1)
    vals = (b & 0x7F).astype(np.uint64) << (7 * pos).astype(np.uint64)
    return np.add.reduceat(vals, starts).astype(np.int64)


_LOCAL = threading.local()


def _zstd_decompressor() -> Any:
    d = getattr(_LOCAL, "zstd", None)
    if d is None:  # one decompressor per thread (they are not thread-safe; creating one is slow)
        d = _LOCAL.zstd = zstandard.ZstdDecompressor()
    return d


def _zstd(body: bytes | memoryview, size: int) -> bytes:
    return _zstd_decompressor().decompress(body, max_output_size=max(size, 1))


def _brotli(body: bytes, size: int) -> bytes:
    import brotli

    return brotli.decompress(body)


def _snappy(body: bytes, size: int) -> bytes:
    import cramjam

    return bytes(memoryview(cramjam.snappy.decompress_raw(body, output_len=size)))


_CODECS = {ord("z"): _zstd, ord("b"): _brotli, ord("s"): _snappy}


def decompress(buf: bytes | memoryview, compression: int, path: str, offset: int) -> bytes:
    """A Riegeli compressed buffer's contents (0: none, 'z' zstd, 'b' brotli, 's' snappy)."""
    if compression == 0:
        return bytes(buf)
    codec = _CODECS.get(compression)
    if codec is None:
        raise ArrayRecordFormatError(f"unknown compression type {compression:#x}", path, offset)
    size, pos = read_varint(buf, 0, path, offset)
    try:  # zstd reads a buffer in place; the others want bytes
        data = codec(buf[pos:] if codec is _zstd else bytes(buf[pos:]), size)
    except Exception as e:  # zstd / brotli / cramjam errors
        raise ArrayRecordFormatError(f"cannot decompress ({e})", path, offset) from e
    if len(data) != size:
        raise ArrayRecordFormatError(
            f"decompressed {len(data)} bytes where the chunk promises {size}", path, offset
        )
    return data


class Chunk:
    """A decoded simple chunk: record ``i`` is ``values[ends[i - 1] : ends[i]]`` (from 0 for the
    first; ``ends`` are the cumulative record ends)."""

    __slots__ = ("values", "ends")

    def __init__(self, values: bytes, ends: list[int]):
        self.values, self.ends = values, ends

    def record(self, i: int) -> bytes:
        start = self.ends[i - 1] if i else 0
        return self.values[start : self.ends[i]]

    @property
    def nbytes(self) -> int:
        return len(self.values) + 8 * len(self.ends)


def decode_chunk(raw: bytes | memoryview, begin: int, path: str) -> Chunk:
    """Decodes the chunk starting at file byte ``begin`` from ``raw``, the file's bytes from
    ``begin`` on (block headers included; at least up to the chunk's end)."""
    bad = bad_block_header(raw, begin)
    if bad >= 0:
        raise ArrayRecordFormatError("a block header's hash does not match its bytes", path, bad)
    data = strip_block_headers(raw, begin)
    if len(data) < CHUNK_HEADER_SIZE:
        raise ArrayRecordFormatError(
            f"a chunk header needs {CHUNK_HEADER_SIZE} bytes, only {len(data)} are there",
            path,
            begin,
        )
    header_hash, data_size, data_hash, type_and_count, decoded_size = _HEADER.unpack_from(data, 0)
    if _hash is not None and _hash(data[8:CHUNK_HEADER_SIZE]) != header_hash:
        raise ArrayRecordFormatError("the chunk header's hash does not match its bytes", path, begin)
    chunk_type, num_records = type_and_count & 0xFF, type_and_count >> 8
    body = memoryview(data)[CHUNK_HEADER_SIZE : CHUNK_HEADER_SIZE + data_size]
    if len(body) != data_size:
        raise ArrayRecordFormatError(
            f"the chunk holds {data_size} bytes of data but the file ends after {len(body)}",
            path,
            begin,
        )
    if _hash is not None and _hash(body) != data_hash:
        raise ArrayRecordFormatError("the chunk data's hash does not match its bytes", path, begin)
    if chunk_type == CHUNK_TRANSPOSED:
        raise ArrayRecordFormatError(
            "transposed chunks (written with the 'transpose' option) are not supported by the "
            "remote reader; copy the file locally or write it without 'transpose'",
            path,
            begin,
        )
    if chunk_type != CHUNK_SIMPLE:
        raise ArrayRecordFormatError(
            f"expected a simple chunk (type 'r'), found type {chunk_type:#x}", path, begin
        )
    if not body:
        raise ArrayRecordFormatError("a simple chunk without data", path, begin)
    compression = body[0]
    sizes_len, pos = read_varint(body, 1, path, begin + CHUNK_HEADER_SIZE)
    if pos + sizes_len > len(body):
        raise ArrayRecordFormatError("the record sizes run past the chunk", path, begin)
    values = decompress(body[pos + sizes_len :], compression, path, begin)
    if num_records == 1 and _hash is not None:
        # One record per chunk (group_size:1) whose data hash matched: its size is the values'
        # (checked against the header below); its own compressed copy need not be decoded.
        ends = [total := len(values)]
    elif num_records == 1:  # no hashes: the size's copy is decoded and compared
        sizes_raw = decompress(body[pos : pos + sizes_len], compression, path, begin)
        size, end = read_varint(sizes_raw, 0, path, begin)
        ends = [size]
        total = size if end == len(sizes_raw) else -1
    else:
        sizes_raw = decompress(body[pos : pos + sizes_len], compression, path, begin)
        ends = np.cumsum(varints(sizes_raw, num_records, path, begin)).tolist()
        total = ends[-1] if ends else 0
    if total != len(values) or len(values) != decoded_size:
        raise ArrayRecordFormatError(
            f"record sizes add up to {total} bytes, the chunk holds {len(values)} and promises "
            f"{decoded_size}",
            path,
            begin,
        )
    return Chunk(values, ends)


_ONE_SIMPLE = (1 << 8) | CHUNK_SIMPLE  # chunk_type and num_records of a one-record simple chunk


def decode_singles(
    data: bytes | bytearray, base: int, begins: Sequence[int], ends: Sequence[int]
) -> list[bytes | None]:
    """The records of one-record simple chunks (``group_size:1``), decoded in one loop: chunk ``k``
    spans file bytes ``[begins[k], ends[k])`` of ``data`` (the file's bytes from offset ``base``).

    Entry ``k`` is the chunk's record, or ``None`` where this path does not apply or finds
    anything wrong (another chunk type or compression, a hash that does not match, a failed
    decompression, a size that disagrees): the caller decodes that chunk with
    :func:`decode_chunk`, which names the problem. A chunk that a block header interrupts (one in
    about 60 of 1 KiB chunks) is decoded here too, from a copy without the header (in C when the
    header is whole inside the chunk and its hash right; otherwise here, which names it). Needs
    :data:`VERIFIES_HASHES` (all ``None`` without HighwayHash). A record returned here passed
    exactly the checks :func:`decode_chunk` makes of it: both hashes, the chunk type and count,
    the sizes. Runs in C where :data:`NATIVE_DECODE` (hashing and zstd without the GIL)."""
    if _hash is None:
        return [None] * len(begins)
    if NATIVE_DECODE:
        out, crossing = _native.decode_singles(data, base, begins, ends, _HASH_KEY)
    else:
        out, crossing = _decode_singles_python(data, base, begins, ends)
    if crossing:
        view = memoryview(data)
        for k in crossing:  # from a copy without the block header (it fits in one block)
            span = view[begins[k] - base : ends[k] - base]
            if bad_block_header(span, begins[k]) >= 0:
                continue  # the general path names it
            flat = strip_block_headers(span, begins[k])
            if len(flat) < BLOCK_SIZE - BLOCK_HEADER_SIZE:
                out[k] = decode_singles(flat, 0, [0], [len(flat)])[0]
    return out


def _decode_singles_python(
    data: bytes | bytearray, base: int, begins: Sequence[int], ends: Sequence[int]
) -> tuple[list[bytes | None], list[int]]:
    """:func:`decode_singles` without the accelerator (highwayhash-cffi and ``zstandard``): the
    records and the chunks a block header interrupts, left ``None`` here."""
    out: list[bytes | None] = [None] * len(begins)
    if _hh_lib is None:
        return out, []
    crossing = []
    hh, key, unpack = _hh_lib.HighwayHash64, _HH_KEY, _HEADER.unpack_from
    ptr = _hh_ffi.from_buffer("uint8_t[]", data)
    at_hashed, at_body = ptr + 8, ptr + CHUNK_HEADER_SIZE  # a chunk's hashed header, its data
    view = memoryview(data)
    unzstd = _zstd_decompressor().decompress
    for k, (b, e) in enumerate(zip(begins, ends)):
        off, end = b - base, e - base
        if b >> 16 != (e - 1) >> 16:  # a block header interrupts it (64 KiB blocks): below
            crossing.append(k)
            continue
        if end - off < CHUNK_HEADER_SIZE + 3:  # too short: the general path names the problem
            continue
        header_hash, size, data_hash, kind, decoded = unpack(data, off)
        body = off + CHUNK_HEADER_SIZE
        stop = body + size
        if kind != _ONE_SIMPLE or stop > end or size < 3:
            continue
        if hh(at_hashed + off, 32, key) != header_hash or hh(at_body + off, size, key) != data_hash:
            continue
        compression, sizes_len = data[body], data[body + 1]
        pos = body + 2 + sizes_len
        if sizes_len >= 0x80 or pos > stop:
            continue
        if compression == 0:
            value = bytes(view[pos:stop])
        elif compression == 0x7A and pos + 1 < stop:  # 'z': the size (a varint), then zstd
            n = data[pos]
            if n < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                n, pos = (n & 0x7F) | (data[pos + 1] << 7), pos + 2
            else:  # 16 KiB or more: a longer varint
                n = -1
            try:
                if n < 0:
                    n, pos = read_varint(data, pos, "", 0)
                value = unzstd(view[pos:stop], max_output_size=n or 1)
            except Exception:
                continue
            if len(value) != n:
                continue
        else:
            continue
        if len(value) == decoded:
            out[k] = value
    return out, crossing


def _footer_fields(values: bytes, ends: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """Fields 1 and 3 (0 where absent) of records ``1..`` of a decoded footer chunk, parsed in
    bulk: every record a flat protobuf message of varint fields, as array_record writes
    ``ArrayRecordFooter``. ``None`` when some record is anything else (the caller then parses
    record by record, which names the problem)."""
    n = len(ends) - 1
    region = np.frombuffer(values, dtype=np.uint8)[ends[0] :]
    bounds = np.asarray(ends[1:], dtype=np.int64) - ends[0]  # each record's end in ``region``
    if region.size == 0:
        return np.zeros(n, np.int64), np.zeros(n, np.int64)
    tok_end = np.flatnonzero(region < 0x80) + 1  # one past each varint
    if tok_end.size == 0 or tok_end[-1] != region.size:
        return None
    tok_start = np.concatenate(([0], tok_end[:-1]))
    if int((tok_end - tok_start).max()) > 9:  # values below 2**63 only
        return None
    inside = bounds[(bounds > 0) & (bounds < region.size)]
    if not np.isin(inside, tok_end).all():  # a varint runs across two records
        return None
    per_record = np.diff(np.searchsorted(tok_end, bounds, side="right"), prepend=0)
    if (per_record % 2).any():  # a key without a value
        return None
    lens = tok_end - tok_start
    shift = (np.arange(region.size) - np.repeat(tok_start, lens)) * 7
    vals = np.add.reduceat((region & 0x7F).astype(np.uint64) << shift.astype(np.uint64), tok_start)
    keys, vals = vals[0::2], vals[1::2].astype(np.int64)  # records hold whole pairs: keys are even
    if (keys & 7).any():  # a field that is not a varint
        return None
    owner = np.repeat(np.arange(n), per_record // 2)
    fields = keys >> 3
    offsets, counts = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for out, field in ((offsets, 1), (counts, 3)):
        hit = fields == field
        out[owner[hit]] = vals[hit]  # repeated: the last one wins, as in protobuf
    return offsets, counts


def _proto_uints(buf: bytes, path: str, offset: int) -> dict[int, int]:
    """The varint fields of a flat protobuf message (other wire types are skipped)."""
    out: dict[int, int] = {}
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos, path, offset)
        field, wire = key >> 3, key & 7
        if wire == 0:
            out[field], pos = read_varint(buf, pos, path, offset)
        elif wire == 2:
            n, pos = read_varint(buf, pos, path, offset)
            pos += n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ArrayRecordFormatError(f"bad protobuf wire type {wire}", path, offset)
    if pos != len(buf):
        raise ArrayRecordFormatError("a protobuf message runs past its record", path, offset)
    return out


def parse_postscript(tail: bytes | memoryview, begin: int, size: int, path: str) -> int:
    """The footer offset, from the file's bytes ``[begin, size)``: its last block, where
    ArrayRecord's postscript chunk starts (``begin`` is the last multiple of 64 KiB below
    ``size``)."""
    if len(tail) != size - begin or begin % BLOCK_SIZE:
        raise ArrayRecordFormatError(
            f"the last block [{begin}, {size}) is incomplete ({len(tail)} bytes)", path, begin
        )
    chunk = decode_chunk(tail, begin, path)
    fields = _proto_uints(chunk.record(0), path, begin) if len(chunk.ends) else {}
    if fields.get(2) != POSTSCRIPT_MAGIC or 1 not in fields:
        raise ArrayRecordFormatError("no ArrayRecord postscript in the last block", path, begin)
    footer = fields[1]
    if not 0 < footer < begin:
        raise ArrayRecordFormatError(f"the footer offset {footer} is out of range", path, begin)
    return footer


def parse_footer(raw: bytes | memoryview, footer: int, size: int, path: str) -> FileIndex:
    """The file's index, from its bytes ``[footer, size - 64 KiB)``."""
    chunk = decode_chunk(raw, footer, path)
    n = len(chunk.ends)
    if n < 1:
        raise ArrayRecordFormatError("the footer chunk has no metadata record", path, footer)
    meta = chunk.record(0)
    # RiegeliFooterMetadata.array_record_metadata (field 1) holds num_chunks (2), num_records (3).
    inner = _proto_submessage(meta, 1, path, footer)
    num_chunks, num_records = inner.get(2, 0), inner.get(3, 0)
    if num_chunks != n - 1:
        raise ArrayRecordFormatError(
            f"the footer lists {n - 1} chunks, its metadata says {num_chunks}", path, footer
        )
    offsets = np.empty(n, dtype=np.int64)
    bulk = _footer_fields(chunk.values, chunk.ends)
    if bulk is not None:
        offsets[: n - 1], counts = bulk
    else:  # record by record (a field of another wire type, or a damaged record)
        counts = np.empty(n - 1, dtype=np.int64)
        for c in range(n - 1):
            f = _proto_uints(chunk.record(c + 1), path, footer)
            offsets[c], counts[c] = f.get(1, 0), f.get(3, 0)
    offsets[n - 1] = footer
    if n > 1 and (np.any(np.diff(offsets) <= 0) or offsets[0] < CHUNK_HEADER_SIZE):
        raise ArrayRecordFormatError("the footer's chunk offsets are not increasing", path, footer)
    starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    if int(starts[-1]) != num_records:
        raise ArrayRecordFormatError(
            f"the footer's chunks hold {int(starts[-1])} records, its metadata says {num_records}",
            path,
            footer,
        )
    return FileIndex(size, offsets, starts)


def _proto_submessage(buf: bytes, field: int, path: str, offset: int) -> dict[int, int]:
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos, path, offset)
        if key & 7 == 2:
            n, pos = read_varint(buf, pos, path, offset)
            if key >> 3 == field:
                return _proto_uints(buf[pos : pos + n], path, offset)
            pos += n
        elif key & 7 == 0:
            _, pos = read_varint(buf, pos, path, offset)
        else:
            pos += 8 if key & 7 == 1 else 4
    raise ArrayRecordFormatError("the footer metadata is not ArrayRecord's", path, offset)
