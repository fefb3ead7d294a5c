"""Output of the command line: text at most 100 columns wide, rich tables, and progress on stderr.

Contract:

* :data:`WIDTH` (100) is the widest any line of a command's output gets; narrower terminals get
  their own width. :func:`wrap` folds one logical line under a tree prefix; :func:`stats_table`
  renders :class:`grain_core.stats.PipelineStats` as a table of that width.
* :class:`Progress` reports long-running work on stderr: nothing for work that ends within a second;
  after that a rich bar when stderr is a terminal, else a plain line every few seconds (so
  redirected output holds whole lines, never carriage returns).
"""

from __future__ import annotations

import io
import shutil
import sys
import textwrap
import time
from typing import IO, Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "WIDTH", "Progress", "console", "print_stats", "render", "stats_table", "width", "wrap",
]

WIDTH = 100
_QUIET_SECONDS = 1.0  # work shorter than this shows no progress at all
_PLAIN_EVERY_SECONDS = 5.0  # a plain line this often when stderr is not a terminal


def width(stream: IO[str] | None = None) -> int:
    """Columns available: the terminal's when ``stream`` is one (at most :data:`WIDTH`), else
    :data:`WIDTH`."""
    stream = sys.stdout if stream is None else stream
    if getattr(stream, "isatty", lambda: False)():
        return max(40, min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns))
    return WIDTH


def console(stream: IO[str] | None = None) -> Console:
    """A rich console writing to ``stream`` (stdout by default), :func:`width` columns wide, with
    colour only on a terminal."""
    stream = sys.stdout if stream is None else stream
    return Console(file=stream, width=width(stream), highlight=False, soft_wrap=False)


def wrap(text: str, first: str, rest: str, columns: int = WIDTH) -> list[str]:
    """``text`` folded to ``columns``: the first line after ``first``, the others after ``rest``
    (prefixes are tree guides such as ``"│  └─ "``)."""
    room = max(20, columns - max(len(first), len(rest)))
    parts = textwrap.wrap(text, room, break_long_words=True, break_on_hyphens=False) or [""]
    return [first + parts[0], *(rest + p for p in parts[1:])]


def stats_table(stats: Any) -> Table:
    """Per-stage statistics as a table: stage (indented by depth), elements, inclusive and own
    seconds, elements/s of own time (``elem/s``), mean prefetch buffer fill."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False, collapse_padding=True)
    table.add_column("stage", overflow="fold", ratio=1)
    for name in ("elements", "total s", "self s", "elem/s", "buffer"):
        table.add_column(name, justify="right", no_wrap=True)
    for s in stats.stages:
        eps = s.elements_per_s
        label = (
            "  " * s.depth
            + s.name
            + (" [map]" if s.kind == "map" else "")
            + (f" [{s.workers} workers]" if s.workers else "")
        )
        table.add_row(
            Text(label),  # not markup: "[map]" is part of the label
            f"{s.elements:,}",
            f"{s.total_s:.4f}",
            f"{s.self_s:.4f}",
            "-" if eps == float("inf") else f"{eps:,.0f}",
            "-" if s.buffer_fill is None else f"{s.buffer_fill:.0%}",
        )
    return table


def render(renderable: Any, columns: int = WIDTH) -> list[str]:
    """``renderable`` (a rich table) as plain lines at most ``columns`` wide, with no trailing
    blanks and no empty first or last line."""
    buffer = io.StringIO()
    Console(file=buffer, width=columns, color_system=None, highlight=False).print(renderable)
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def print_stats(stats: Any, out: Console) -> None:
    """The table, a note on worker stages, the wall time and the slowest stage."""
    for line in render(stats_table(stats), out.width):
        out.print(line, markup=False)
    if any(s.workers for s in stats.stages):
        for line in wrap(
            "[N workers]: runs in mp_prefetch worker processes; elements and times summed over them",
            "", "  ", out.width,
        ):
            out.print(line, markup=False)
    slowest = stats.slowest
    for line in wrap(
        f"wall time {stats.wall_s:.3f} s; slowest stage: {slowest.name if slowest else '-'}",
        "", "  ", out.width,
    ):
        out.print(line, markup=False)


class Progress:
    """Progress of a loop over elements, on ``stream`` (stderr by default).

    ``update(elements, nbytes)`` after each element; ``close()`` at the end (also a context
    manager). ``total`` is the number of elements expected, or ``None``; ``seconds`` a time limit,
    or ``None``: with either, the terminal bar shows how far along the run is.
    """

    def __init__(self, label: str, *, total: int | None = None, seconds: float | None = None,
                 enabled: bool = True, stream: IO[str] | None = None):
        self.label = label
        self.total = total
        self.seconds = seconds
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self._last_plain = self.start
        self._bar: Any = None
        self._task: Any = None
        self.elements = 0
        self.nbytes = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _text(self, elapsed: float) -> str:
        from grain_core.cli._target import human_bytes

        rate = self.elements / elapsed if elapsed > 0 else 0.0
        bps = self.nbytes / elapsed if elapsed > 0 else 0.0
        return (f"{self.elements:,} elements  {rate:,.1f} elements/s  {human_bytes(bps)}/s  "
                f"{elapsed:.1f} s")

    def update(self, elements: int, nbytes: int = 0) -> None:
        self.elements, self.nbytes = elements, nbytes
        if not self.enabled:
            return
        now = time.perf_counter()
        elapsed = now - self.start
        if elapsed < _QUIET_SECONDS:
            return
        if not self.tty:
            if now - self._last_plain >= _PLAIN_EVERY_SECONDS or self._last_plain == self.start:
                self._last_plain = now
                self.stream.write(f"{self.label}: {self._text(elapsed)}\n")
                self.stream.flush()
            return
        if self._bar is None:
            self._start_bar()
        if self.total is not None:
            completed: float = elements
        elif self.seconds is not None:
            completed = min(elapsed, self.seconds)
        else:
            completed = 0
        self._bar.update(self._task, completed=completed, info=self._text(elapsed))

    def _start_bar(self) -> None:
        from rich.progress import BarColumn, SpinnerColumn, TextColumn
        from rich.progress import Progress as RichProgress

        bounded = self.total is not None or self.seconds is not None
        columns = [SpinnerColumn(), TextColumn(self.label)]
        if bounded:
            columns.append(BarColumn(bar_width=24))
        columns.append(TextColumn("{task.fields[info]}"))
        self._bar = RichProgress(
            *columns, console=Console(file=self.stream, width=width(self.stream)), transient=True
        )
        total = self.total if self.total is not None else self.seconds
        self._task = self._bar.add_task(self.label, total=total, info="")
        self._bar.start()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
