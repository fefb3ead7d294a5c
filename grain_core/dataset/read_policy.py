"""Whether a threaded ``to_iter_dataset`` reads ahead of its consumer, or only the chunk asked for
(by a pool thread, or by the consumer itself).

Reading ahead in threads pays off when reading releases the GIL (I/O, large numpy work) or when the
consumer does (a training step): reading then overlaps consuming. When reading is cheap Python
work, threads reading ahead only compete with the consumer for the GIL and the cores, and the
consumer runs several times slower. Not reading ahead, the chunk the consumer asks for is read
while it waits, in one of two ways (:attr:`ReadModePolicy.inline`):

* *on demand*: a pool thread reads it: no contention, one thread hand-off per chunk, and a slow
  element does not hold back finished ones (the consumer's usual slow-head fallback applies);
* *inline*: the consumer reads it itself, as with ``num_threads=0``: no hand-off, but a slow
  element holds back the earlier elements of its own chunk until it is read. So chunks are read
  inline only once ``INLINE_AGAIN_STEPS`` chunks in a row took under ``INLINE_MAX_SECONDS`` to read
  (1/25 of the iterator's slow-head threshold, and chunks read this way are sized to take a few
  milliseconds); a chunk that took longer sends the next ones back to the pool (on demand). What
  a slow element can hold back is thus one chunk of elements read while chunks were quick, once
  in a row of quick chunks; until then, and after it, the guarantee holds as on demand.

:class:`ReadModePolicy` decides between reading ahead and not by measuring both, end to end: the
iterator reports, for every chunk it makes current, how many indices the consumer went through
since the previous one and how long that took (:class:`ReadStep`; the consumer's own work is
included, since that is where the contention shows), and how long reading it took when it was read
while the consumer waited (which decides inline). The policy compares the two modes' rates over
windows of steps and keeps the faster:

* it measures not reading ahead first (cheap to measure: no pool to fill, nothing to contend) for
  ``FIRST_WINDOWS`` windows, then reading ahead for one window once the pool has read a buffer's
  worth, and keeps not reading ahead unless reading ahead was faster by ``SWITCH_MARGIN``
  (``start_prefetch()`` asks for reading ahead at once: then reading ahead is measured first and
  kept unless not reading ahead is faster by the margin);
* it keeps that mode for ``FIRST_BACKOFF`` times as long as the other mode's last stint took
  (its window, with the chunks skipped and drained around it), then probes the other for one
  window and switches if the other is faster by ``SWITCH_MARGIN``; each confirmed choice doubles
  that factor (up to ``MAX_BACKOFF``), a switch resets it. So probing takes about a ninth of the
  time, and less and less while the choice holds, however long each mode's windows take;
* a window at less than ``DROP_FACTOR`` of the rate the current mode had when chosen (reads
  turned expensive, say) brings the next probe forward to now;
* reading ahead is neither explored nor probed after a window without it whose chunks were all
  read while the consumer waited and took less than ``1 - 1/SWITCH_MARGIN`` of its time: reading
  ahead can at best hide that time, so it could not win by the margin (the consumer's own work,
  such as a window shuffle's or a training step's, is the rest). Each later window is checked
  again, so reads turning expensive are noticed;
* nor while the iterator reports that too few elements remain for measuring reading ahead to pay
  off (``ReadStep.ahead_can_pay``, false when under ``prefetch.EXPLORE_LEFT`` buffers' worth are
  left to read): the measurement itself reads about three buffers' worth in the pool (one to
  settle, then the skipped and the measured chunks, each up to half a buffer), at the cost of
  reading ahead where it loses (cheap reads holding the GIL run much slower in threads), so in a
  short run it would cover most of what is left, and even a win could not make up for it.

The kept mode's rate, for these comparisons, is the best of its last ``HISTORY`` windows (a
probe has its one window): on a shared machine a window is only ever slowed down by others, and
one slowed window should not make the policy switch.

A window is at least ``MIN_STEPS`` steps of the current mode and ``MIN_SECONDS`` (only
``EXPLORE_STEPS`` and ``EXPLORE_SECONDS`` while exploring at the start, so that short runs are
not mostly spent measuring; a wrong first choice is corrected by the first probe). The first
``FIRST_SKIP_STEPS`` steps (chunks still growing, or the pool ramping up) and the first
``SKIP_STEPS`` after a switch are not counted (the pool is still filling or draining), nor are
steps not ``settled`` (reading ahead before the pool has read a buffer's worth since it started:
the consumer is still waiting for a pool filling up) or steps of the other mode (chunks read ahead
before the switch are consumed first).

The policy has no clock: it sees only the measurements given to it, so tests drive it with
made-up steps. The iterator keeps it in its private ``_policy`` attribute and uses only
:attr:`ReadModePolicy.read_ahead`, :attr:`ReadModePolicy.inline`, :meth:`ReadModePolicy.record`
and :meth:`ReadModePolicy.start_reading_ahead`, so tests also replace it with scripted decisions.
It decides how reading is scheduled, never what is read: the elements, their order, the
iterator's state and the bound on elements in flight (``prefetch_buffer_size``) do not depend on
it.
"""

from __future__ import annotations

import collections
import dataclasses


@dataclasses.dataclass(frozen=True)
class ReadStep:
    """One chunk made current: whether it was ``read_ahead`` (else read when asked for), and the
    ``elements`` (indices) the consumer went through in the ``seconds`` since the previous chunk
    was made current; ``settled`` False while reading ahead has not yet filled its buffer once
    since it (re)started (the step is not measured, its time counts as the mode's cost);
    ``read_seconds``: how long reading the chunk made current took, when it was read while the
    consumer waited (inline or on demand; None when it was read ahead); ``ahead_can_pay``: False
    when too few elements remain for measuring reading ahead to pay off (see the module
    docstring)."""

    read_ahead: bool
    elements: int
    seconds: float
    settled: bool = True
    read_seconds: float | None = None
    ahead_can_pay: bool = True


class ReadModePolicy:
    """Chooses between reading ahead in the pool (:attr:`read_ahead` True) and reading only the
    chunk asked for (False), then by the consumer itself (:attr:`inline` True) or by a pool
    thread; see the module docstring."""

    MIN_STEPS = 4
    MIN_SECONDS = 0.03
    EXPLORE_SECONDS = 0.01
    EXPLORE_STEPS = 2
    FIRST_SKIP_STEPS = 2
    SKIP_STEPS = 2
    HISTORY = 3
    FIRST_WINDOWS = 2
    SWITCH_MARGIN = 1.25
    FIRST_BACKOFF = 8
    MAX_BACKOFF = 256
    DROP_FACTOR = 0.5

    INLINE_MAX_SECONDS = 0.01
    INLINE_AGAIN_STEPS = 8

    def __init__(self, read_ahead: bool = False):
        self.read_ahead = read_ahead
        # Not reading ahead: whether the consumer reads the chunk itself (else a pool thread
        # reads it while the consumer waits); see _note_read.
        self.inline = False
        self._quick_reads = 0  # chunks in a row read in under INLINE_MAX_SECONDS (not inline)
        self.phase = "first"  # "first", "second" (exploring), "keep", "probe"
        # elements/s of each mode's last windows, newest last
        self.windows: dict[bool, collections.deque[float]] = {
            m: collections.deque(maxlen=self.HISTORY) for m in (True, False)
        }
        self._chosen_rate = 0.0  # the current mode's rate when it was (last) chosen
        self._backoff = self.FIRST_BACKOFF
        self._since_switch = 0.0  # seconds of all steps since the mode last changed (or was kept)
        self._probe_seconds = 0.0  # how long the latest stint in the other mode took
        self._first_stint = 0.0  # how long the first mode was measured at the start
        self._started = False
        self._ahead_can_pay = True  # as the latest step said
        self._reset_window(self.FIRST_SKIP_STEPS)

    def rate(self, read_ahead: bool) -> float:
        """A mode's rate: the best of its last ``HISTORY`` windows (0.0 before any)."""
        return max(self.windows[read_ahead], default=0.0)

    def _reset_window(self, skip: int = 0) -> None:
        self._skip = skip
        self._steps = 0
        self._elements = 0
        self._seconds = 0.0
        # Seconds the window's chunks took to read while the consumer waited; None once a step
        # of the window has no such measurement.
        self._read_seconds: float | None = 0.0

    def _ahead_cannot_win(self) -> bool:
        """Whether reading ahead cannot beat the window just measured without it by
        ``SWITCH_MARGIN``: reading ahead at best hides the time the consumer spent waiting for
        its chunks to be read, so it is at most ``seconds / (seconds - read seconds)`` times as
        fast; below the margin it is not worth measuring (with cheap reads, that measurement is
        the slow part of a short run). Nor is it while too few elements remain for the
        measurement to pay off (the latest step's ``ahead_can_pay``)."""
        read = self._read_seconds
        if self.read_ahead:
            return False
        if not self._ahead_can_pay:
            return True
        if read is None or self._seconds <= 0.0:
            return False
        return read * self.SWITCH_MARGIN < (self.SWITCH_MARGIN - 1.0) * self._seconds

    def _switch(self, read_ahead: bool) -> None:
        changed = read_ahead != self.read_ahead
        if changed:
            self._since_switch = 0.0
        self.read_ahead = read_ahead
        self._reset_window(self.SKIP_STEPS if changed else 0)

    def start_reading_ahead(self) -> None:
        """Starts with reading ahead (the iterator was asked to read ahead at once); only before
        any step."""
        if not self._started:
            self.read_ahead = True

    def record(self, step: ReadStep) -> None:
        """Takes one measurement; may change :attr:`read_ahead`."""
        self._started = True
        self._ahead_can_pay = step.ahead_can_pay
        self._note_read(step.read_seconds)
        self._since_switch += max(step.seconds, 0.0)
        if step.read_ahead != self.read_ahead or step.elements <= 0 or not step.settled:
            return
        if self._skip:
            self._skip -= 1
            return
        self._steps += 1
        self._elements += step.elements
        self._seconds += max(step.seconds, 0.0)
        if self._read_seconds is not None:
            read = step.read_seconds
            self._read_seconds = None if read is None else self._read_seconds + max(read, 0.0)
        exploring = self.phase in ("first", "second")
        min_seconds = self.EXPLORE_SECONDS if exploring else self.MIN_SECONDS
        min_steps = self.EXPLORE_STEPS if exploring else self.MIN_STEPS
        if self._steps < min_steps or self._seconds < min_seconds:
            return
        window = self._elements / self._seconds
        mode = self.read_ahead
        self.windows[mode].append(window)
        if self.phase == "first":
            if len(self.windows[mode]) < self.FIRST_WINDOWS:
                self._reset_window()
                return
            if self._ahead_cannot_win():
                # nothing to explore: keep not reading ahead, check again at the next window
                self._keep(mode, reset_backoff=True, cost=0.0)
                return
            self.phase = "second"
            self._first_stint = self._since_switch
            self._switch(not mode)
        elif self.phase == "second":
            # the first mode (reading ahead: no pipeline starts slower than before this policy)
            # stays unless the second is faster by the margin
            first = not mode
            best = mode if self.rate(mode) > self.SWITCH_MARGIN * self.rate(first) else first
            # the next probe is of the other mode: it will take about as long as its stint did
            cost = self._first_stint if best == mode else self._since_switch
            self._keep(best, reset_backoff=True, cost=cost)
        elif self.phase == "probe":
            kept, cost = not mode, self._since_switch
            if window > self.SWITCH_MARGIN * self.rate(kept):
                self._keep(mode, reset_backoff=True, cost=cost)
            else:
                self._backoff = min(2 * self._backoff, self.MAX_BACKOFF)
                self._keep(kept, reset_backoff=False, cost=cost)
        else:  # "keep"
            due = self._since_switch >= self._backoff * self._probe_seconds
            if (due or window < self.DROP_FACTOR * self._chosen_rate) and not (
                self._ahead_cannot_win()
            ):
                self.phase = "probe"
                self._switch(not mode)
            else:
                self._reset_window()

    def _note_read(self, seconds: float | None) -> None:
        """Inline while chunks read when asked for take under ``INLINE_MAX_SECONDS``; after one
        that took longer, in the pool until ``INLINE_AGAIN_STEPS`` in a row are that quick."""
        if seconds is None:
            return
        if seconds >= self.INLINE_MAX_SECONDS:
            self.inline, self._quick_reads = False, 0
        elif not self.inline:
            self._quick_reads += 1
            if self._quick_reads >= self.INLINE_AGAIN_STEPS:
                self.inline, self._quick_reads = True, 0

    def _keep(self, mode: bool, *, reset_backoff: bool, cost: float) -> None:
        if reset_backoff:
            self._backoff = self.FIRST_BACKOFF
        self.phase = "keep"
        self._probe_seconds = cost
        self._chosen_rate = self.rate(mode)
        self._switch(mode)
        self._since_switch = 0.0
