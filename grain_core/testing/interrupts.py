"""Ctrl-C checks for the conformance kit: does an iterator survive ``KeyboardInterrupt`` in ``next()``?

A person who presses Ctrl-C while a notebook cell iterates a pipeline and then runs the cell again
expects to continue where it stopped: no element lost, none repeated. These helpers test exactly
that with real signals, and need nothing but the standard library:

* :class:`Interrupter` — a real ``SIGALRM`` interval timer whose handler raises
  ``KeyboardInterrupt`` when the main thread is executing code of the given packages (by default
  grain_core's), at most once per armed ``next()`` call, as a person pressing Ctrl-C would;
* :func:`drain_with_interrupts` — reads an iterator to its end under an :class:`Interrupter`,
  calling ``next()`` again after every interrupt; returns the elements and how many interrupts
  landed;
* :class:`Injector` — makes every ``every``-th call of a named function (a blocking point: a queue
  wait, a pool wait) raise ``KeyboardInterrupt`` before it runs: where a real Ctrl-C lands while the
  consumer waits, deterministically;
* :func:`drain_with_injected` — reads an iterator to its end, continuing after every injected
  interrupt.

Compare the elements with an uninterrupted run; no check depends on timing. POSIX only (interval
timers); the main thread must call these.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grain_core

_MISSING = object()
_HERE = __file__

__all__ = [
    "Injector",
    "Interrupter",
    "InterruptedRun",
    "check_interrupts",
    "drain_with_injected",
    "drain_with_interrupts",
    "run_with_interrupts",
]


def _package_dirs(packages: Iterable[types.ModuleType | str]) -> tuple[str, ...]:
    dirs = []
    for p in packages:
        if isinstance(p, str):
            dirs.append(os.path.join(os.path.abspath(p), ""))
            continue
        path = getattr(p, "__file__", None)
        if not path:
            raise ValueError(f"Interrupter: cannot tell where module {p!r} lives.")
        if hasattr(p, "__path__"):  # a package: every file under its directory
            dirs.append(os.path.join(os.path.dirname(os.path.abspath(path)), ""))
        else:  # a single-file module
            dirs.append(os.path.abspath(path))
    return tuple(dirs)


def _in_finalizer(frame: types.FrameType | None) -> bool:
    """Whether ``frame`` runs inside a ``__del__`` or a ``weakref.finalize`` callback (the garbage
    collector runs them at any point; Python ignores exceptions raised there)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or (
            code.co_name == "__call__" and code.co_filename.endswith("weakref.py")
        ):
            return True
        frame = frame.f_back
    return False


class Interrupter:
    """A real interval timer raising ``KeyboardInterrupt`` inside the code of ``packages``.

    Use as a context manager (it installs a ``SIGALRM`` handler and an ``ITIMER_REAL`` timer of
    ``interval`` seconds, and puts both back on exit). While :attr:`armed` is true, the first timer
    signal that arrives while the main thread executes a file of one of ``packages`` (packages: every
    file under their directory; single-file modules: that file; directory paths; default:
    ``grain_core``) raises ``KeyboardInterrupt`` there and disarms the
    interrupter; :attr:`raised` counts them. Arm it around each ``next()`` call. Frames of the
    functions in ``exclude`` are never interrupted: pass the loop that calls ``next()`` when it
    lives in one of ``packages`` (a test module whose functions the pipeline calls), so that an
    element ``next()`` returned is not lost by the loop itself.

    ``per_call`` (default 1) interrupts may land per armed call: the second and later ones land
    while the code is still handling the first (its ``except`` and ``finally`` blocks, a
    give-back), as when a person presses Ctrl-C twice.
    """

    def __init__(
        self,
        packages: Iterable[types.ModuleType | str] = (grain_core,),
        interval: float = 0.0003,
        exclude: Iterable[Any] = (),
        per_call: int = 1,
    ):
        if not hasattr(signal, "setitimer"):
            raise RuntimeError("Interrupter needs POSIX interval timers (signal.setitimer).")
        if not interval > 0:
            raise ValueError(f"Interrupter: interval must be > 0 seconds, got {interval!r}.")
        self.dirs = _package_dirs(packages)
        self._exclude = frozenset(f.__code__ for f in exclude)
        if not isinstance(per_call, int) or per_call < 1:
            raise ValueError(f"Interrupter: per_call must be an int >= 1, got {per_call!r}.")
        self.interval = float(interval)
        self.per_call = per_call
        self._left = 0
        self.raised = 0
        self._old: Any = None

    @property
    def armed(self) -> bool:
        """Whether the next timer signal in ``packages`` raises; setting it ``True`` allows
        ``per_call`` interrupts until it is set ``False`` again."""
        return self._left > 0

    @armed.setter
    def armed(self, on: bool) -> None:
        self._left = self.per_call if on else 0

    def _handler(self, signum: int, frame: types.FrameType | None) -> None:
        if (
            self.armed
            and frame is not None
            and frame.f_code.co_filename.startswith(self.dirs)
            and frame.f_code.co_filename != _HERE  # never in the harness's own loop
            and frame.f_code not in self._exclude
            and not _in_finalizer(frame)
        ):
            self._left -= 1
            self.raised += 1
            raise KeyboardInterrupt

    def __enter__(self) -> Interrupter:
        self._old = signal.signal(signal.SIGALRM, self._handler)
        # Another user of the timer (pytest-timeout's signal method) gets it back on exit.
        self._old_timer = signal.setitimer(signal.ITIMER_REAL, self.interval, self.interval)
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._left = 0
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        time.sleep(0.001)  # a signal still pending runs this (disarmed) handler, not the old one
        signal.signal(signal.SIGALRM, self._old)
        delay, interval = self._old_timer
        if delay > 0:
            left = max(delay - (time.monotonic() - self._start), 0.001)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def drain_with_interrupts(
    it: Iterator[Any],
    packages: Iterable[types.ModuleType | str] = (grain_core,),
    interval: float = 0.0003,
    max_interrupts: int | None = None,
) -> tuple[list[Any], int]:
    """Reads ``it`` to its end under an :class:`Interrupter`, calling ``next()`` again after each
    ``KeyboardInterrupt``; returns ``(elements, number of interrupts)``.

    ``max_interrupts`` stops arming the interrupter after that many (default: no limit).
    """
    with Interrupter(packages, interval) as intr:

        def arm(on: bool) -> None:
            intr.armed = on and (max_interrupts is None or intr.raised < max_interrupts)

        out = _drain_retrying(it, arm)
    return out, intr.raised


def _drain_retrying(it: Iterator[Any], arm: Callable[[bool], None] = lambda on: None) -> list[Any]:
    """Reads ``it`` to its end, calling ``next()`` again after each ``KeyboardInterrupt``;
    ``arm(True)`` before each call and ``arm(False)`` after it, however it ended."""
    out: list[Any] = []
    while True:
        arm(True)
        try:
            x = next(it)
        except KeyboardInterrupt:
            continue
        except StopIteration:
            break
        finally:
            arm(False)
        out.append(x)
    return out


class Injector:
    """Makes every ``every``-th call of ``owner.name`` raise ``KeyboardInterrupt`` before running.

    A context manager: the attribute is replaced on enter and put back on exit. :attr:`calls`
    counts the calls, :attr:`count` the interrupts raised. ``owner`` is a class or module whose
    function the consumer calls where it blocks.
    """

    def __init__(self, owner: Any, name: str, every: int = 3):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"Injector: every must be an int >= 1, got {every!r}.")
        self.owner, self.name, self.every = owner, name, every
        self.count = 0
        self.calls = 0
        self._orig: Any = None

    def __enter__(self) -> Injector:
        # What to put back: the attribute as the owner itself holds it (a class may inherit it).
        own = vars(self.owner) if hasattr(self.owner, "__dict__") else {}
        self._orig = own.get(self.name, _MISSING)
        fn = getattr(self.owner, self.name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls % self.every == 0:
                self.count += 1
                raise KeyboardInterrupt
            return fn(*args, **kwargs)

        setattr(self.owner, self.name, wrapper)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._orig is _MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self._orig)


def drain_with_injected(it: Iterator[Any], injector: Injector) -> list[Any]:
    """Reads ``it`` to its end, calling ``next()`` again after each ``KeyboardInterrupt``; checks
    that ``injector`` raised at least one (else the blocking point was never reached)."""
    out = _drain_retrying(it)
    if injector.count == 0:
        raise AssertionError(
            f"{injector.name} was called {injector.calls} times and never interrupted: the test "
            "does not reach the blocking point it means to interrupt."
        )
    return out


@dataclasses.dataclass
class InterruptedRun:
    """What :func:`run_with_interrupts` saw: the ``elements`` returned, how many interrupts were
    ``raised``, and ``states``: ``(elements returned before it, state)`` for a ``get_state()``
    taken right after each interrupt (under interrupts too, retried until one call completes)."""

    elements: list[Any]
    raised: int
    states: list[tuple[int, Any]]


def run_with_interrupts(
    it: Iterator[Any],
    packages: Iterable[types.ModuleType | str] = (grain_core,),
    *,
    interval: float = 0.0003,
    per_call: int = 1,
    read_chunks: bool = False,
    chunk_size: int = 7,
    max_states: int = 50,
    max_streak: int = 3,
) -> InterruptedRun:
    """Reads ``it`` to its end under an :class:`Interrupter` (``per_call`` interrupts per call:
    2 or more also interrupts the handling of the first), by ``next()`` or, with
    ``read_chunks``, by ``next_chunk(chunk_size)``, calling again after every interrupt; after
    an interrupt (up to ``max_states`` times) takes ``get_state()``, itself under interrupts.

    Progress whatever the machine's speed: after ``max_streak`` interrupted calls in a row, one
    call runs without interrupts (a call slower than the timer would otherwise be interrupted
    forever); retried calls are interrupted again until then."""
    out: list[Any] = []
    states: list[tuple[int, Any]] = []
    streak = 0
    with Interrupter(packages, interval, per_call=per_call) as intr:
        while True:
            intr.armed = streak < max_streak
            try:
                got = it.next_chunk(chunk_size) if read_chunks else [next(it)]  # type: ignore[attr-defined]
            except KeyboardInterrupt:
                intr.armed = False
                streak += 1
                tries = 0
                while len(states) < max_states:
                    intr.armed = tries < max_streak
                    try:
                        state = it.get_state()  # type: ignore[attr-defined]
                    except KeyboardInterrupt:
                        tries += 1
                        continue
                    finally:
                        intr.armed = False
                    states.append((len(out), state))
                    break
                continue
            except StopIteration:
                break
            finally:
                intr.armed = False
            streak = 0
            out += got
    return InterruptedRun(out, intr.raised, states)


def _plain(x: Any) -> Any:
    """``x`` with arrays as nested lists and tuples as lists, for comparisons."""
    if hasattr(x, "tolist") and hasattr(x, "shape"):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(y) for y in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _short(x: Any, limit: int = 300) -> str:
    text = repr(x)
    return text if len(text) <= limit else text[:limit] + "..."


def check_interrupts(
    make: Callable[[], Iterable[Any]],
    packages: Iterable[types.ModuleType | str] = (grain_core,),
    *,
    per_call: int = 1,
    read_chunks: bool = False,
    restores: int = 4,
    interval: float = 0.0003,
) -> InterruptedRun:
    """Checks that the pipeline ``make()`` builds loses and repeats nothing under real interrupts:
    its elements read under :func:`run_with_interrupts` equal those of an uninterrupted run (same
    order), and up to ``restores`` of the states taken right after interrupts, each set on a new
    iterator, give exactly the rest. Raises ``AssertionError`` saying what differs; returns the
    run. Only the elements are compared, never how many interrupts landed where (timing)."""
    expected = _plain(list(make()))
    it = iter(make())
    try:
        run = run_with_interrupts(
            it, packages, interval=interval, per_call=per_call, read_chunks=read_chunks
        )
    finally:
        getattr(it, "close", lambda: None)()
    got = _plain(run.elements)
    if got != expected:
        first = next(
            (i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected))
        )
        raise AssertionError(
            f"Under {run.raised} interrupts the pipeline returned {len(got)} elements, "
            f"{len(expected)} expected; the first difference is at element {first}: "
            f"{_short(got[first:first + 3])} instead of {_short(expected[first:first + 3])}."
        )
    step = max(1, len(run.states) // max(1, restores))
    for pos, state in run.states[::step][:restores]:
        again = iter(make())
        try:
            again.set_state(state)  # type: ignore[attr-defined]
            rest = _plain(list(again))
        finally:
            getattr(again, "close", lambda: None)()
        if rest != expected[pos:]:
            raise AssertionError(
                f"A state taken after an interrupt, {pos} elements in, restores to {len(rest)} "
                f"elements, not the {len(expected) - pos} left: {_short(rest[:3])} instead of "
                f"{_short(expected[pos:pos + 3])}."
            )
    return run
