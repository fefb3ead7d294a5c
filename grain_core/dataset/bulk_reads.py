"""Sources that declare ``bulk_read_size``: how ``to_iter_dataset`` gives them their indices.

A random-access source may declare an integer attribute ``bulk_read_size`` (class attribute or
property; 0 or absent: no declaration). It says that one ``__getitems__`` call has a large fixed
cost that a call of that many indices amortises: a round trip (a remote reader that makes one
call's reads concurrent and coalesces nearby byte ranges), or a thread pool's fan-out
(array_record's C++ reader). Measuring chunk times cannot see that reliably: on a loaded machine,
or with several threads' calls sharing one event loop, a call's time reflects everyone's queue
rather than its own size.

``to_iter_dataset`` (``prefetch.PrefetchDatasetIterator``) then, once it knows an element's size
(after the first chunk of a (re)start, which stays small so the first element comes after one
round trip), reads chunks of at least :func:`bulk_floor` elements: the declared size divided by
the most source indices one element reads (``chunking.source_fan_in``: a batch's size), at most
``CHUNK_BYTES`` of elements and at most the chunk cap without threads (``_MAX_SYNC_CHUNK`` source
indices), with threads too (a floor above the threaded cap, ``_MAX_CHUNK``, raises that cap).
With threads and a buffer it may hold ``max(prefetch_buffer_size, 3 x floor)`` elements read
ahead: while one call's elements are consumed, two calls are in flight, so one call's round trip
overlaps another's decoding (with two, a fast consumer left one call in flight at a time: its
latency and its CPU work in series). The memory read ahead stays below
``max(prefetch_buffer_size elements, 3 x CHUNK_BYTES)``. What is read and when changes; which
elements come out, their order and the state do not.

The declaration is found through the ``MapDataset`` stages above the source (map, shuffle, slice,
filter, ...): the largest declaration of the sources under the stage is used.
"""

from __future__ import annotations

from typing import Any

from grain_core.dataset.chunking import CHUNK_BYTES, stages_below

__all__ = ["bulk_floor", "declared_bulk_size"]


def declared_bulk_size(ds: Any) -> int:
    """The largest ``bulk_read_size`` declared by a source under ``ds`` (0 when none does)."""
    best = 0
    for node, _ in stages_below(ds):
        source = None if getattr(node, "parents", None) else getattr(node, "source", None)
        size = getattr(source, "bulk_read_size", 0) if source is not None else 0
        if isinstance(size, int) and not isinstance(size, bool) and size > best:
            best = size
    return best


def bulk_floor(declared: int, elem_bytes: int, cap: int) -> int:
    """The fewest indices a chunk gets for a source that declared ``declared`` (0: no floor):
    at most ``cap`` and ``CHUNK_BYTES`` of elements of ``elem_bytes`` bytes; 0 while an element's
    size is not known yet (``elem_bytes`` 0)."""
    if declared <= 0 or elem_bytes <= 0:
        return 0
    return max(1, min(declared, cap, CHUNK_BYTES // elem_bytes))
