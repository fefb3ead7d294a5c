"""``SharedMemoryDataSource`` (Grain's ``grain.sources.SharedMemoryDataSource``, legacy name
``grain.python.InMemoryDataSource``): a random-access source held in one shared-memory block.

``SharedMemoryDataSource(elements)`` copies ``elements`` into a new block; pickling the source (to a
worker process) sends only the block's name, and ``SharedMemoryDataSource(name=...)`` attaches to an
existing block. Elements are limited to what :class:`multiprocessing.shared_memory.ShareableList`
stores: ``int``, ``float``, ``bool``, ``str`` and ``bytes`` (each under 10 MB) and ``None``; the
length is fixed.

The process that created the block calls :meth:`unlink` when no process needs it any more (every
process calls :meth:`close` for its own mapping); the source is a context manager that closes on
exit, and the creator's ``with`` block also unlinks.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Sequence
from multiprocessing import shared_memory
from typing import Any

__all__ = ["SharedMemoryDataSource"]

_log = logging.getLogger(__name__)


class SharedMemoryDataSource(shared_memory.ShareableList):
    """A fixed-length list in shared memory usable as a ``RandomAccessDataSource``."""

    def __init__(self, elements: Sequence[Any] | None = None, *, name: str | None = None):
        if elements is None and name is None:
            raise ValueError(
                "SharedMemoryDataSource needs elements (to create a block) or name= (to attach to "
                "an existing one)."
            )
        if elements is not None:
            elements = list(elements)
            _log.info("Creating a new ShareableList%s", f" with name {name}" if name else "")
        else:
            _log.info("Attaching to a ShareableList named %s", name)
        super().__init__(elements, name=name)
        self._created = elements is not None
        self._closed = False

    def __getitem__(self, record_key: Any) -> Any:
        if isinstance(record_key, slice):
            get = shared_memory.ShareableList.__getitem__
            return [get(self, i) for i in range(len(self))[record_key]]
        return super().__getitem__(operator.index(record_key))

    def __reduce__(self) -> Any:
        return (_attach, (self.shm.name,))

    def __str__(self) -> str:
        return f"InMemoryDataSource(name={self.shm.name}, len={len(self)})"

    def __repr__(self) -> str:
        return f"SharedMemoryDataSource(name={self.shm.name!r}, len={len(self)})"

    def close(self) -> None:
        """Unmaps the block in this process (idempotent)."""
        if not self._closed:
            self._closed = True
            self.shm.close()

    def unlink(self) -> None:
        """Frees the block (call once, from the creating process, when no process needs it)."""
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> SharedMemoryDataSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self._created:
            self.unlink()


def _attach(name: str) -> SharedMemoryDataSource:
    return SharedMemoryDataSource(name=name)
