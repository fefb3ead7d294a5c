"""Grain's ``grain.multiprocessing`` module: ``SharedMemoryArray`` and ``MultiprocessingOptions``.

``SharedMemoryArray(shape, dtype)`` is a numpy array whose buffer is a named POSIX shared-memory
block (``multiprocessing.shared_memory``). Pickling it sends only the block's name, so another
process on the same machine maps the same memory without copying; ``arr.metadata`` (a
:class:`SharedMemoryArrayMetadata`) is the same handle as a small dataclass and
``SharedMemoryArray.from_metadata(md)`` opens it again.

Lifetime (Grain's contract): every process that opened the block closes its mapping when its array
is garbage collected; exactly one of them -- the one that called :meth:`SharedMemoryArray.unlink_on_del`
-- also unlinks the block, or someone calls :meth:`SharedMemoryArrayMetadata.close_and_unlink_shm`.
Without either the block outlives the process.

grain_core's own multiprocess runtime does not need these arrays (it moves numpy buffers through its
pooled segments, :mod:`grain_core.runtime.shm`); they exist for code written against Grain.
"""

from __future__ import annotations

import dataclasses
import math
import mmap
import threading
from collections.abc import Iterable
from concurrent import futures
from multiprocessing import shared_memory
from typing import Any, SupportsIndex

import numpy as np

from grain_core.options import MultiprocessingOptions

__all__ = ["MultiprocessingOptions", "SharedMemoryArray", "SharedMemoryArrayMetadata"]


@dataclasses.dataclass(slots=True, frozen=True)
class SharedMemoryArrayMetadata:
    """Names a shared-memory array: its block ``name``, ``shape`` and ``dtype``."""

    name: str
    shape: Iterable[int]
    dtype: Any

    def close_and_unlink_shm(self) -> None:
        """Unlinks the block (frees it once every process has unmapped it)."""
        shm = shared_memory.SharedMemory(self.name)
        shm.close()
        shm.unlink()


def _release(shm: shared_memory.SharedMemory, unlink: bool) -> None:
    try:
        shm.close()
    except BufferError:  # another view still exports the buffer; the mapping goes with it
        pass
    if unlink:
        try:
            shm.unlink()
        except FileNotFoundError:
            pass


class SharedMemoryArray(np.ndarray):
    """A numpy array backed by a named shared-memory block (see the module docstring)."""

    _lock = threading.Lock()
    _executor: futures.ThreadPoolExecutor | None = None
    _slots: threading.Semaphore | None = None

    def __new__(cls, shape: Iterable[int], dtype: Any = float) -> SharedMemoryArray:
        shape = tuple(int(d) for d in shape)
        nbytes = max(1, math.prod(shape) * np.dtype(dtype).itemsize)
        shm = shared_memory.SharedMemory(create=True, size=nbytes)
        return cls.from_shared_memory(shm, shape, dtype)

    @classmethod
    def from_shared_memory(
        cls, shm: shared_memory.SharedMemory, shape: Any, dtype: Any
    ) -> SharedMemoryArray:
        """An array over the open block ``shm`` (which it then owns)."""
        arr = np.ndarray.__new__(cls, tuple(shape), np.dtype(dtype), buffer=shm.buf)
        arr.shm = shm
        arr._unlink_on_del = False
        return arr

    @classmethod
    def from_metadata(cls, metadata: SharedMemoryArrayMetadata) -> SharedMemoryArray:
        """Opens the block ``metadata`` names (created by this or another process)."""
        return cls.from_shared_memory(
            shared_memory.SharedMemory(metadata.name), metadata.shape, metadata.dtype
        )

    def __array_finalize__(self, obj: Any) -> None:
        # Views and slices keep a reference to the block but never close or unlink it.
        self.shm = getattr(obj, "shm", None) if obj is not None else None
        self._unlink_on_del = False

    def __array_wrap__(self, obj: Any, context: Any = None, return_scalar: bool = False) -> Any:
        # Results of arithmetic are ordinary arrays in ordinary memory.
        if return_scalar:
            return obj[()]
        return np.asarray(obj).view(np.ndarray)

    @property
    def metadata(self) -> SharedMemoryArrayMetadata:
        """The handle another process opens this array with."""
        if self.shm is None:
            raise ValueError("This SharedMemoryArray view has no shared-memory block.")
        return SharedMemoryArrayMetadata(name=self.shm.name, shape=self.shape, dtype=self.dtype)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        return type(self).from_metadata, (self.metadata,)

    def unlink_on_del(self) -> None:
        """Makes this array unlink the block when it is garbage collected."""
        self._unlink_on_del = True

    @classmethod
    def enable_async_del(cls, num_threads: int = 1, max_outstanding_requests: int = 50) -> None:
        """Closes (and unlinks) blocks of collected arrays on ``num_threads`` background threads,
        at most ``max_outstanding_requests`` at a time (beyond that, synchronously)."""
        with cls._lock:
            if SharedMemoryArray._executor is None:
                SharedMemoryArray._executor = futures.ThreadPoolExecutor(
                    num_threads, thread_name_prefix="grain_core_shm_del"
                )
                SharedMemoryArray._slots = threading.Semaphore(
                    max(num_threads, max_outstanding_requests)
                )

    @classmethod
    def close_shm_async(cls, shm: shared_memory.SharedMemory, unlink: bool) -> None:
        """The background task of :meth:`enable_async_del`: releases ``shm`` and frees a slot."""
        try:
            _release(shm, unlink)
        finally:
            if SharedMemoryArray._slots is not None:
                SharedMemoryArray._slots.release()

    def __del__(self) -> None:
        # Only the array that owns the mapping (not a view) releases it.
        if not isinstance(self.base, mmap.mmap) or self.shm is None:
            return
        shm, unlink = self.shm, self._unlink_on_del
        executor, slots = SharedMemoryArray._executor, SharedMemoryArray._slots
        if executor is not None and slots is not None and slots.acquire(blocking=False):
            executor.submit(SharedMemoryArray.close_shm_async, shm, unlink)
        else:
            _release(shm, unlink)
