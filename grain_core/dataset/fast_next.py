"""A ``__next__`` that serves a list of ready elements before the thread guard.

An iterator that holds its next elements in a list (a window shuffle's buffered window, a chunk
read ahead) pays the guard's extra Python frame on every ``next()`` (about 70 ns on top of the
iterator's own step; :mod:`grain_core.dataset.concurrency`). :func:`list_serving_next` builds the
``__next__`` that skips it: while no thread is inside the iterator and ``self.<items>`` holds an
element at ``self.<pos>``, ``next()`` returns it and advances ``self.<pos>``, with no call between
the guard's owner test and the store (the "Fast paths" rule of
:mod:`grain_core.dataset.concurrency`); anything else runs ``full(self)``, the iterator's complete
``next()``, through the guard. A measured iterator (``grain_core.stats``) always takes the guarded
path, so its statistics count every element.

Usage, in a :class:`~grain_core.dataset.iterator.DatasetIterator` subclass::

    def _next_full(self):  # the whole next(): serve self._buf[self._pos] or read more
        ...

    __next__ = list_serving_next("_buf", "_pos", _next_full)

``full`` must itself serve ``self.<items>[self.<pos>]`` when there is one (the guarded path is also
taken when the fast one could have served, e.g. under a statistics recorder).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grain_core.dataset.concurrency import guarded, guarded_fast

__all__ = ["list_serving_next"]

# With ``stop``: an int attribute bounding the servable positions (no exception at the list's end,
# and 0 when the list may not be served at all).
_TEMPLATE_STOP = """
def __next__(self):
    if self._grain_owner is None:
        i = self.{pos}
        if i < self.{stop}:
            x = self.{items}[i]
            self.{pos} = i + 1
            return x
    return full(self)
"""

_TEMPLATE = """
def __next__(self):
    if self._grain_owner is None:
        i = self.{pos}
        try:
            x = self.{items}[i]
        except IndexError:
            pass
        else:
            self.{pos} = i + 1
            return x
    return full(self)
"""


def list_serving_next(
    items: str, pos: str, full: Callable[[Any], Any], stop: str | None = None
) -> Callable[[Any], Any]:
    """Returns a ``__next__`` serving ``self.<items>[self.<pos>]`` before the guard, else calling
    ``full(self)`` through the guard (see the module docstring). ``items`` and ``pos`` name
    attributes of the iterator: a list (or anything indexable raising ``IndexError`` past its end)
    and the int index of its next element. ``stop``, when given, names an int attribute: only
    positions below it are served before the guard (then ``items`` must be a list holding them),
    which spares an ``IndexError`` at the list's end and lets an iterator keep a list it may not
    serve this way (``stop`` 0). Raises ``ValueError`` for a name that is not an identifier."""
    for name in (items, pos) if stop is None else (items, pos, stop):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"list_serving_next: {name!r} is not an attribute name.")
    namespace: dict[str, Any] = {
        "full": guarded(full, "__next__"),
        "__name__": getattr(full, "__module__", __name__),  # the new function's __module__
    }
    template = _TEMPLATE if stop is None else _TEMPLATE_STOP
    exec(template.format(items=items, pos=pos, stop=stop), namespace)  # no call inside
    fn = namespace["__next__"]
    fn.__qualname__ = getattr(full, "__qualname__", "__next__").rsplit(".", 1)[0] + ".__next__"
    fn.__doc__ = full.__doc__
    return guarded_fast(fn)
