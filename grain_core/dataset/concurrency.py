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

The same wrappers are the statistics hook, at no cost when statistics are off: an iterator
measured by ``grain_core.stats`` has a *recorder* (:func:`set_stats_recorder`) and keeps it in
``_grain_owner`` while no thread is inside, so the ``None`` test above fails and the call takes the
other path, which sees the recorder, stores its thread's ident as usual, runs the outermost
``__next__`` / ``next_chunk`` through ``recorder.timed_next(fn, it)`` /
``recorder.timed_chunk(fn, it, max_elements)`` (other methods plainly) and puts the recorder back.
An unmeasured iterator runs exactly the code above.

Fast paths: a hot ``__next__`` (the mix's, the window shuffle's) may serve an element of a chunk
it already holds *before* the guard, when ``_grain_owner`` is ``None`` and the whole step is
attribute reads, one list subscript and one attribute store, with no call in between: CPython
switches threads and runs signal handlers only at calls and backward jumps, so no other thread can
enter between that ``None`` test and the store, exactly as for the guard's own test-and-store.
Anything else (the chunk is all served, another thread or a recorder is in ``_grain_owner``) goes
through the guarded method, which makes the same checks as before. :func:`guarded_fast` marks such
a ``__next__`` so that it is not wrapped again. It saves the wrapper's Python frame per element
(measured ~190 -> ~115 ns for a trivial ``__next__``).

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

__all__ = [
    "ConcurrentIteratorUseError",
    "guarded",
    "guarded_fast",
    "set_stats_recorder",
    "stats_recorder",
]

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
    who = f"thread {_thread_name(owner)}" if owner.__class__ is int else "another thread"
    raise ConcurrentIteratorUseError(
        f"{type(self).__name__}.{method}() was called from thread {_thread_name(me)} while "
        f"{who} is inside this iterator. An iterator may be used by one thread at "
        "a time: give each thread its own iterator (iter(dataset) in each), or serialise the "
        "calls with a threading.Lock around next()/get_state()/set_state()."
    )


def _busy(self: Any, me: int, method: str, fn: Callable[..., Any], args: tuple) -> Any:
    """The path of a call that found ``_grain_owner`` set: a measured iterator with nobody inside
    (its recorder is there), a nested call of the owner thread, or another thread (refused)."""
    owner = self._grain_owner
    if owner is not None and owner.__class__ is not int:  # a stats recorder: idle and measured
        self._grain_owner = me
        try:
            if method == "__next__":
                return owner.timed_next(fn, self)
            if method == "next_chunk":
                return owner.timed_chunk(fn, self, args[0])
            return _plain_call(fn, self, args)
        finally:
            self._grain_owner = owner
    _refuse(self, me, method)
    return _plain_call(fn, self, args)  # a nested call of the owner


def _plain_call(fn: Callable[..., Any], self: Any, args: tuple) -> Any:
    """``fn(self, *args)`` without a star call for up to one argument: CPython 3.11 runs pending
    signal handlers right after a star call returns, where a Ctrl-C would drop the element it
    returned; a plain call of a Python function returns without that check."""
    if not args:
        return fn(self)
    if len(args) == 1:
        return fn(self, args[0])
    return fn(self, *args)


def stats_recorder(it: Any) -> Any:
    """The statistics recorder of a guarded iterator (:func:`set_stats_recorder`), or ``None``."""
    return vars(it).get("_grain_stats_recorder") if hasattr(it, "__dict__") else None


def set_stats_recorder(it: Any, recorder: Any) -> None:
    """Makes the guarded methods of ``it`` run through ``recorder`` (``None``: plainly again).

    ``recorder`` has ``timed_next(fn, it)`` and ``timed_chunk(fn, it, max_elements)``, which call
    ``fn`` and record its time and elements. Only while no thread is inside ``it``.
    """
    owner = it._grain_owner
    if owner is not None and owner.__class__ is int:
        raise RuntimeError(
            f"A statistics recorder was set on {type(it).__name__} while thread "
            f"{_thread_name(owner)} is inside it; set it before the iterator is used."
        )
    it._grain_owner = recorder
    it._grain_stats_recorder = recorder


def guarded(fn: F, method: str | None = None) -> F:
    """Wraps an iterator method so that a call from a second thread while another thread is inside
    any guarded method of the same object raises :class:`ConcurrentIteratorUseError`.

    Idempotent (a guarded function is returned as it is). The object's class needs a
    ``_grain_owner = None`` class attribute (:func:`guard_class` adds it).
    """
    if getattr(fn, "_grain_guarded", False):
        return fn
    name = method or fn.__name__

    # Between reading _grain_owner and storing it there is no call (no thread switch, no signal
    # handler): that pair is atomic under the GIL, and the ``try`` clearing it starts right after.
    if name in ("__next__", "get_state"):

        @functools.wraps(fn)
        def call(self: Any) -> Any:
            me = _get_ident()
            if self._grain_owner is None:
                self._grain_owner = me
                try:
                    return fn(self)
                finally:
                    self._grain_owner = None
            return _busy(self, me, name, fn, ())  # measured, nested, or another thread inside

    elif name in ("next_chunk", "set_state"):

        @functools.wraps(fn)
        def call(self: Any, arg: Any) -> Any:
            me = _get_ident()
            if self._grain_owner is None:
                self._grain_owner = me
                try:
                    return fn(self, arg)
                finally:
                    self._grain_owner = None
            return _busy(self, me, name, fn, (arg,))

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
            if kwargs:
                _refuse(self, me, name)
                return fn(self, *args, **kwargs)
            return _busy(self, me, name, fn, args)

    call._grain_guarded = True  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]


def guarded_fast(fn: F) -> F:
    """Marks ``fn``, a ``__next__`` with a fast path before the guard (see "Fast paths" above),
    as guarded, so :func:`guard_class` leaves it as it is. Everything but the fast path must go
    through a :func:`guarded` method."""
    fn._grain_guarded = True  # type: ignore[attr-defined]
    return fn


def guard_class(cls: type, methods: tuple[str, ...]) -> None:
    """Wraps the ``methods`` that ``cls`` itself defines with :func:`guarded`."""
    if not hasattr(cls, "_grain_owner"):
        cls._grain_owner = None  # type: ignore[attr-defined]
    own = cls.__dict__
    for method in methods:
        fn = own.get(method)
        if fn is not None and callable(fn) and not getattr(fn, "_grain_guarded", False):
            setattr(cls, method, guarded(fn, method))
