"""The concurrency contract of iterators: one thread at a time, or a clear error (never a hang).

An iterator is not thread-safe: ``next()``, ``next_chunk()``, ``get_state()`` and ``set_state()``
must not run in two threads at once on the same iterator. This module makes that a checked rule:
a second thread entering one of them while another thread is inside any of them gets
:class:`ConcurrentIteratorUseError` at once, naming the iterator and what to do, instead of racing
on the iterator's state or waiting forever on a worker (two threads in one ``mp_prefetch``
consumer used to hang). Calls from the thread already inside (a stage calling its own
``get_state()`` from ``set_state()``) and handing an iterator from one thread to another between
calls are fine.

One home: :class:`~grain_core.dataset.iterator.DatasetIterator` wraps these methods of every subclass
with :func:`guarded` (kernel stages, runtime iterators and plugins' iterators alike); other
iterator-like classes (the ``DataLoader``'s iterator) wrap theirs explicitly.

Cost: one extra Python call per guarded call, an ident lookup and two attribute stores (about
0.1 µs of CPU). Stages pull their parents in chunks, so per element only the iterator the caller
holds pays it.

The same wrappers of ``__next__`` and ``next_chunk`` are the statistics hook: every iterator has a
``stats_recorder`` (``None`` unless ``grain_core.stats`` built it), and the outermost call goes
through it when set. Off, that is one attribute read per call.

How it works (CPython with the GIL): each iterator has a ``_grain_owner`` attribute, ``None`` or
the ident of the thread inside it. A call reads it and, if ``None``, stores its thread's ident with
no call in between (so no other thread runs between the two), then clears it when it returns; a
call that finds its own ident is a nested call of that thread; any other ident is another thread
inside, and the call raises.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ConcurrentIteratorUseError", "guarded"]

_get_ident = threading.get_ident
F = TypeVar("F", bound=Callable[..., Any])


class ConcurrentIteratorUseError(RuntimeError):
    """Raised in a thread that calls an iterator while another thread is inside it."""


def _thread_name(ident: int) -> str:
    for t in threading.enumerate():
        if t.ident == ident:
            return repr(t.name)
    return f"(ident {ident})"


def _refuse(self: Any, me: int, method: str) -> None:
    """The slow path: a thread's ident was stored when this call began. Returns for a nested call
    of that thread; raises otherwise (the calls overlapped, even if the other one has just left)."""
    owner = self._grain_owner
    if owner == me:
        return
    who = "another thread" if owner is None else f"thread {_thread_name(owner)}"
    raise ConcurrentIteratorUseError(
        f"{type(self).__name__}.{method}() was called from thread {_thread_name(me)} while "
        f"{who} is inside this iterator. An iterator may be used by one thread at "
        "a time: give each thread its own iterator (iter(dataset) in each), or serialise the "
        "calls with a threading.Lock around next()/get_state()/set_state()."
    )


def guarded(fn: F, method: str | None = None) -> F:
    """Wraps an iterator method so that a call from a second thread while another thread is inside
    any guarded method of the same object raises :class:`ConcurrentIteratorUseError`.

    Idempotent (a guarded function is returned as it is). The object's class needs a
    ``_grain_owner = None`` and a ``stats_recorder = None`` class attribute (:func:`guard_class`
    adds them). A ``stats_recorder`` (statistics on) has ``timed_next(fn, it)`` and
    ``timed_chunk(fn, it, max_elements)``, which call ``fn`` and record its time and elements.
    """
    if getattr(fn, "_grain_guarded", False):
        return fn
    name = method or fn.__name__

    # Between reading _grain_owner and storing it there is no call (no thread switch, no signal
    # handler): that pair is atomic under the GIL, and the ``try`` clearing it starts right after.
    # ``__next__`` and ``next_chunk`` also carry the statistics hook: the outermost call goes
    # through the iterator's ``stats_recorder`` when it has one (``grain_core.stats`` sets it on
    # the iterators it builds; ``None`` otherwise, one attribute read). Nested calls are not timed.
    if name == "__next__":

        @functools.wraps(fn)
        def call(self: Any) -> Any:
            me = _get_ident()
            if self._grain_owner is None:
                self._grain_owner = me
                try:
                    recorder = self.stats_recorder
                    if recorder is None:
                        return fn(self)
                    return recorder.timed_next(fn, self)
                finally:
                    self._grain_owner = None
            _refuse(self, me, name)
            return fn(self)  # a nested call of the owner

    elif name == "next_chunk":

        @functools.wraps(fn)
        def call(self: Any, arg: Any) -> Any:
            me = _get_ident()
            if self._grain_owner is None:
                self._grain_owner = me
                try:
                    recorder = self.stats_recorder
                    if recorder is None:
                        return fn(self, arg)
                    return recorder.timed_chunk(fn, self, arg)
                finally:
                    self._grain_owner = None
            _refuse(self, me, name)
            return fn(self, arg)

    elif name == "get_state":

        @functools.wraps(fn)
        def call(self: Any) -> Any:
            me = _get_ident()
            if self._grain_owner is None:
                self._grain_owner = me
                try:
                    return fn(self)
                finally:
                    self._grain_owner = None
            _refuse(self, me, name)
            return fn(self)  # a nested call of the owner

    elif name == "set_state":

        @functools.wraps(fn)
        def call(self: Any, arg: Any) -> Any:
            me = _get_ident()
            if self._grain_owner is None:
                self._grain_owner = me
                try:
                    return fn(self, arg)
                finally:
                    self._grain_owner = None
            _refuse(self, me, name)
            return fn(self, arg)

    else:

        @functools.wraps(fn)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            me = _get_ident()
            if self._grain_owner is None:
                self._grain_owner = me
                try:
                    return fn(self, *args, **kwargs)
                finally:
                    self._grain_owner = None
            _refuse(self, me, name)
            return fn(self, *args, **kwargs)

    call._grain_guarded = True  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]


def guard_class(cls: type, methods: tuple[str, ...]) -> None:
    """Wraps the ``methods`` that ``cls`` itself defines with :func:`guarded`."""
    if not hasattr(cls, "_grain_owner"):
        cls._grain_owner = None  # type: ignore[attr-defined]
    if not hasattr(cls, "stats_recorder"):
        cls.stats_recorder = None  # type: ignore[attr-defined]
    own = cls.__dict__
    for method in methods:
        fn = own.get(method)
        if fn is not None and callable(fn) and not getattr(fn, "_grain_guarded", False):
            setattr(cls, method, guarded(fn, method))
