"""What a long command shows while it works: stage banners, progress with rate and time left, log lines.

Everything goes to stderr (stdout keeps the results: tables, JSON) and only from the main process
(:func:`dare.scaling.distributed.is_main`), so several processes print one progress display. Two styles:

* ``rich``: live bars (``rich.progress``) when stderr is a terminal; log lines print above them;
* ``plain``: when stderr is not a terminal (CI, ``> log.txt``): a task prints one line when it has run
  for ``DARE_PROGRESS_INTERVAL`` seconds (default 30) since its last line, and a last line when it ends.

While a run directory's ``run.log`` is open (:mod:`dare.run.log`), every line shown is copied there (the
rich style's live bars are not: only the lines they leave).

``DARE_PROGRESS=rich|plain|off`` chooses the style explicitly. A stage banner (:func:`stage`) names
what starts: ``evaluate``, ``train``, ``validate``, ``report``. A :class:`Task` counts units of work
(steps, rows, completions); its rate and time left count only the work done since it started, so a
resumed run's time left is not skewed by the steps an earlier process did.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

from dare.run.log import note

__all__ = ["style", "stage", "log", "Task", "task", "format_seconds"]

_ENV_STYLE = "DARE_PROGRESS"
_ENV_INTERVAL = "DARE_PROGRESS_INTERVAL"


def _is_main() -> bool:
    if "torch" not in sys.modules:  # nothing has started processes: this is the only one
        return True
    from dare.scaling.distributed import is_main

    return is_main()


def style() -> str:
    """``"rich"``, ``"plain"`` or ``"off"``: ``$DARE_PROGRESS`` when set, else rich on a terminal (stderr)."""
    chosen = os.environ.get(_ENV_STYLE, "").strip().lower()
    if chosen in ("rich", "plain", "off"):
        return chosen
    try:
        return "rich" if sys.stderr.isatty() else "plain"
    except (AttributeError, ValueError):
        return "plain"


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get(_ENV_INTERVAL, "30")))
    except ValueError:
        return 30.0


def check_environment() -> None:
    """Refuse a ``DARE_PROGRESS`` other than rich/plain/off and a non-numeric or negative
    ``DARE_PROGRESS_INTERVAL`` (:class:`dare.errors.DareError`, one line naming the variable)."""
    from dare.errors import DareError

    chosen = os.environ.get(_ENV_STYLE)
    if chosen is not None and chosen.strip().lower() not in ("", "rich", "plain", "off"):
        raise DareError(f"{_ENV_STYLE}={chosen!r} is not one of rich, plain, off (or leave it unset)")
    interval = os.environ.get(_ENV_INTERVAL)
    if interval is not None and interval.strip():
        try:
            ok = float(interval) >= 0
        except ValueError:
            ok = False
        if not ok:
            raise DareError(f"{_ENV_INTERVAL}={interval!r} must be a number of seconds >= 0 (default 30)")


def format_seconds(seconds: float) -> str:
    """``"45s"``, ``"3m 05s"``, ``"2h 04m"``."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


# --------------------------------------------------------------------------- the shared rich display
class _Display:
    """One ``rich.progress.Progress`` for the process, started by the first open task, stopped by the last; it
    shows the running tasks only (a finished task leaves its last line above the bars)."""

    progress = None
    console = None
    open_tasks = 0

    @classmethod
    def get_console(cls):
        if cls.console is None:
            from rich.console import Console

            from dare.run.log import console_stream

            cls.console = Console(file=console_stream())  # stderr; the live bars are not copied into run.log
        return cls.console

    @classmethod
    def add(cls, description: str, total: int | None, completed: int):
        if cls.progress is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            cls.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                    TextColumn("{task.fields[unit]}"), TextColumn("{task.fields[info]}"),
                                    console=cls.get_console(), transient=False)
            cls.progress.start()
        cls.open_tasks += 1
        return cls.progress.add_task(description, total=total, completed=completed, unit="", info="")

    @classmethod
    def remove(cls, task_id) -> None:
        if cls.progress is None:
            return
        cls.progress.remove_task(task_id)
        cls.open_tasks -= 1
        if cls.open_tasks <= 0:
            cls.progress.stop()
            cls.progress, cls.open_tasks = None, 0


def _write(line: str) -> None:
    if style() == "rich":
        _Display.get_console().print(line, markup=False, highlight=False)
        note(line)
    else:
        print(line, file=sys.stderr, flush=True)


def log(line: str) -> None:
    """Print ``line`` (main process; above the live bars in rich style; nothing with ``DARE_PROGRESS=off``)."""
    if style() != "off" and _is_main():
        _write(line)


def stage(name: str, detail: str = "") -> None:
    """A banner for the stage that starts: ``name`` (evaluate, train, validate, report) and what it does."""
    if style() == "off" or not _is_main():
        return
    if style() == "rich":
        _Display.get_console().rule(f"[bold]{name}[/bold]" + (f": {detail}" if detail else ""), align="left")
        note(f"== {name}" + (f": {detail}" if detail else "") + " ==")
    else:
        _write(f"== {name}" + (f": {detail}" if detail else "") + " ==")


class Task:
    """Progress of ``total`` units of work (``None``: unknown), from ``completed`` on.

    :param final_line: print a last line when the task ends (off for short repeated tasks, such as each
        rollout, which then show only while they run: a bar, or in plain style a line past the interval).
    :param clock: ``() -> seconds`` (tests); default ``time.monotonic``.
    """

    def __init__(self, description: str, total: int | None, unit: str = "", completed: int = 0,
                 final_line: bool = True, clock: Callable[[], float] = time.monotonic):
        self.description, self.total, self.unit = description, total, unit
        self.start_completed = self.completed = completed
        self.final_line = final_line
        self.clock = clock
        self.started = self.last_line = clock()
        self.style = style() if _is_main() else "off"
        self._id = _Display.add(description, total, completed) if self.style == "rich" else None
        if self._id is not None:
            _Display.progress.update(self._id, unit=unit)
        self.closed = False

    # ------------------------------------------------------------------ numbers
    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    @property
    def rate(self) -> float | None:
        """Units per second since the task started (None before any unit or second)."""
        done, t = self.completed - self.start_completed, self.elapsed
        return done / t if done > 0 and t > 0 else None

    @property
    def remaining(self) -> float | None:
        """Seconds left at the current rate (None when unknown)."""
        r = self.rate
        return (self.total - self.completed) / r if r and self.total is not None else None

    def status(self) -> str:
        """``"3.2 rows/s, 1m 05s elapsed, ~2m 10s left"``."""
        parts = []
        r = self.rate
        if r is not None:
            parts.append(f"{r:.2f} {self.unit or 'units'}/s" if r < 10 else f"{r:.0f} {self.unit or 'units'}/s")
        parts.append(f"{format_seconds(self.elapsed)} elapsed")
        left = self.remaining
        if left is not None and self.completed < (self.total or 0):
            parts.append(f"~{format_seconds(left)} left")
        return ", ".join(parts)

    def line(self) -> str:
        """``"train: 25/750 steps (1.32 steps/s, 19s elapsed, ~9m 08s left)"``."""
        of = f"/{self.total}" if self.total is not None else ""
        return f"{self.description}: {self.completed}{of} {self.unit} ({self.status()})".replace("  ", " ")

    # ------------------------------------------------------------------ updates
    def update(self, completed: int, quiet: bool = False) -> None:
        """Set the units done so far (rich: redraw; plain: a line when the interval has passed, unless ``quiet``:
        the caller prints its own line now, see :meth:`printed`)."""
        self.completed = completed
        if self.style == "rich":
            _Display.progress.update(self._id, completed=completed, info=self.status())
        elif self.style == "plain" and not quiet:
            now = self.clock()
            if now - self.last_line >= _interval() and not (self.total is not None and completed >= self.total):
                self.last_line = now
                _write(self.line())

    def printed(self) -> None:
        """A line about this task was just printed (plain style: the next periodic line waits a full interval)."""
        self.last_line = self.clock()

    def advance(self, n: int = 1) -> None:
        self.update(self.completed + n)

    def close(self) -> None:
        """End the task (plain: its last line, when ``final_line``)."""
        if self.closed:
            return
        self.closed = True
        if self.style == "rich":
            _Display.remove(self._id)
        if self.style != "off" and self.final_line:
            _write(self.line())

    def __enter__(self) -> Task:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def task(description: str, total: int | None, unit: str = "", completed: int = 0, final_line: bool = True) -> Task:
    """A :class:`Task` (use it as a context manager, so it closes on errors and Ctrl-C too)."""
    return Task(description, total, unit, completed, final_line)
