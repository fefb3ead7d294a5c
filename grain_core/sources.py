"""Data sources: the ``RandomAccessDataSource`` protocol and, through plugins, concrete sources
(``RangeDataSource``, ``ArrayRecordDataSource``, ...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, SupportsIndex, TypeVar, runtime_checkable

from grain_core.lazy import lazy_module_attrs

T = TypeVar("T", covariant=True)

__all__ = ["RandomAccessDataSource", "SupportsBulkRead"]


@runtime_checkable
class RandomAccessDataSource(Protocol[T]):
    """A source with efficient random access: ``len(src)`` records, ``src[i]`` one record.

    Sources should be picklable (reopen files in the new process rather than pickling handles),
    thread-safe, and may be context managers that close their files in ``__exit__``. A source that
    can read many records at once defines ``__getitems__(indices) -> Sequence``; grain_core then
    reads it in bulk. Inheriting this class is optional.
    """

    def __len__(self) -> int: ...

    def __getitem__(self, record_key: SupportsIndex) -> T: ...


@runtime_checkable
class SupportsBulkRead(Protocol[T]):
    """A source that reads many records at once, in the order asked."""

    def __getitems__(self, record_keys: Sequence[int]) -> Sequence[T]: ...


__getattr__, __dir__ = lazy_module_attrs(
    __name__,
    {"SharedMemoryDataSource": "grain_core.memory_source"},
    ("sources",),
    globals(),
)


