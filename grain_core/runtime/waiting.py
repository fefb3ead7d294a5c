"""Waiting until one of several pipes, sockets or process sentinels can be read, on every platform.

The process runtime waits on its pipes through this module only, never with ``select.select`` or
``select.poll`` directly (those take only file descriptors and ``poll`` does not exist on Windows):

* :func:`wait_readable` is :func:`multiprocessing.connection.wait`: it takes
  ``multiprocessing`` connections, sockets and process sentinels on every platform (and file
  descriptors on POSIX), and always with a timeout (every wait of the runtime is bounded).
* :class:`Poller` waits on the same set of objects many times (the consumer's I/O thread): where
  the platform has ``select.poll`` it keeps one poll object for its whole life, since a selector
  built for each wait (what ``multiprocessing.connection.wait`` does) cost more than the read it
  waited for; elsewhere (Windows) each wait is :func:`wait_readable`.

The in-process wake-up channels of the runtime are ``socket.socketpair()`` pairs, waitable on
every platform (an ``os.pipe`` is not on Windows).
"""

from __future__ import annotations

import multiprocessing.connection
import select
from collections.abc import Sequence
from typing import Any

__all__ = ["Poller", "wait_readable"]


def wait_readable(objects: Sequence[Any], timeout: float) -> list[Any]:
    """The ``objects`` ready to be read (or closed at the other end) within ``timeout`` seconds,
    empty when none was; ``timeout`` must be a number (no wait here is unbounded)."""
    if timeout is None or timeout < 0:
        raise ValueError(f"wait_readable needs a timeout >= 0 (seconds), got {timeout!r}.")
    return multiprocessing.connection.wait(list(objects), timeout)


class Poller:
    """A set of objects (connections, sockets, process sentinels) waited on many times. Each is
    known by the number :meth:`register` returns (its file descriptor, or handle on Windows);
    :meth:`wait` returns the numbers of those ready to be read. Used from one thread."""

    def __init__(self) -> None:
        self._objects: dict[int, Any] = {}
        self._poll = select.poll() if hasattr(select, "poll") else None

    def register(self, obj: Any) -> int:
        fd = obj if isinstance(obj, int) else obj.fileno()
        self._objects[fd] = obj
        if self._poll is not None:
            self._poll.register(fd, select.POLLIN)
        return fd

    def unregister(self, fd: int) -> None:
        if self._objects.pop(fd, None) is not None and self._poll is not None:
            self._poll.unregister(fd)

    def wait(self, timeout: float) -> list[int]:
        """The numbers of the registered objects ready within ``timeout`` seconds (a number)."""
        if self._poll is not None:
            return [fd for fd, _ in self._poll.poll(timeout * 1000)]
        by_id = {id(obj): fd for fd, obj in self._objects.items()}
        return [by_id[id(obj)] for obj in wait_readable(list(self._objects.values()), timeout)]
