"""One progress display for lenpred's long loops (collection, features, teacher forcing, draft training).

* On a terminal: a rich progress bar on stderr (description, bar, done / total, the caller's info
  text, elapsed time and, unless the caller keeps its own, the time left).
* Otherwise (stderr redirected to a log file, a ``nohup`` job): one plain line at most every
  ``log_every`` seconds (60 by default) and one at the end, so a day-long job writes a few kilobytes
  to its log, not a redraw per step. ``log_every=None``: no lines (the caller logs its own events).
* Disabled (``--no-progress``): nothing at all.

Use it as a context manager or call :meth:`Progress.close`::

    with Progress("training", total=cfg.max_steps, initial=step, unit="step") as bar:
        for ...:
            bar.update(1, info=f"loss {loss:.3f}")
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["Progress", "clock_text"]


def clock_text(seconds: float) -> str:
    """Seconds as H:MM:SS."""
    h, rem = divmod(int(round(max(seconds, 0.0))), 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}"


class Progress:
    """A progress display over ``total`` units (``initial`` of them done before this session)."""

    # 10 parameters, kept: a tqdm-style keyword constructor (desc, total, initial, unit, ...) callers name one by one
    def __init__(self, desc: str, total: int | None, *, initial: int = 0, unit: str = "", enabled: bool = True,
                 eta: bool = True, log_every: float | None = 60.0, stream: TextIO | None = None,
                 terminal: bool | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.desc, self.total, self.unit, self.eta = desc, total, unit, eta
        self.initial = self.done = int(initial)
        self.info = ""
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.log_every = log_every
        self._clock = clock
        self._t0 = self._last_line = clock()
        self._rich: Any = None
        self._closed = False
        is_tty = terminal if terminal is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        if enabled and is_tty:
            self._start_rich()

    @property
    def live(self) -> bool:
        """True while a bar is drawn on a terminal (False: disabled, or plain lines into a log)."""
        return self._rich is not None

    def _start_rich(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            ProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress
        from rich.text import Text

        unit = self.unit

        class Rate(ProgressColumn):  # units per second (rich's speed column counts bytes)
            def render(self, task: Any) -> Text:
                return Text(f"{task.speed:.3g} {unit}/s" if task.speed else "")

        columns: list[Any] = [TextColumn(f"[bold]{self.desc}"), BarColumn(), MofNCompleteColumn()]
        if self.unit:
            columns += [TextColumn(self.unit), Rate()]
        columns += [TextColumn("{task.fields[info]}"), TimeElapsedColumn()]
        if self.eta:
            columns.append(TimeRemainingColumn())
        self._rich = RichProgress(*columns, console=Console(file=self.stream, force_terminal=True), transient=False)
        self._task = self._rich.add_task(self.desc, total=self.total, completed=self.initial, info="")
        self._rich.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def update(self, advance: int = 1, info: str | None = None) -> None:
        """``advance`` more units done; ``info`` replaces the text shown beside the count."""
        if not self.enabled or self._closed:
            return
        self.done += int(advance)
        if info is not None:
            self.info = info
        if self._rich is not None:
            self._rich.update(self._task, advance=advance, info=self.info)
        elif self.log_every is not None and self._clock() - self._last_line >= self.log_every:
            self._write_line()

    def line(self) -> str:
        """The plain line a log gets: count, rate of this session, elapsed, time left, info."""
        elapsed = self._clock() - self._t0
        of = f"/{self.total}" if self.total is not None else ""
        unit = f" {self.unit}" if self.unit else ""
        parts = [f"{self.desc}: {self.done}{of}{unit}"]
        now = self.done - self.initial
        if elapsed > 0 and now > 0:
            rate = now / elapsed
            parts.append(f"{rate:.3g}{unit}/s")
            if self.eta and self.total is not None:
                parts.append(f"~{clock_text(max(self.total - self.done, 0) / rate)} left")
        parts.append(f"{clock_text(elapsed)} elapsed")
        if self.info:
            parts.append(self.info)
        return ", ".join(parts)

    def _write_line(self) -> None:
        self._last_line = self._clock()
        print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the bar (a log gets its last line); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._rich is not None:
            self._rich.stop()
        elif self.enabled and self.log_every is not None and self.done > self.initial:
            self._write_line()
