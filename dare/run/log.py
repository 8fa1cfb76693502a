"""``run.log``: what a command printed on the console, kept in its run directory.

Once the run directory exists (:func:`dare.run.stages.setup`), the main process copies everything it
writes to ``sys.stdout`` and ``sys.stderr`` into ``<output.dir>/run.log`` (appended: each command of the run
starts with a ``== command (time) ==`` line), ANSI colour and cursor codes removed. Only the main process
writes the file (:func:`dare.scaling.distributed.is_main`: the caller checks), so several processes never interleave
in it. rich's live progress bars redraw many times a second and are not copied: the progress module writes
them to :func:`console_stream` and copies each finished line with :func:`note` (in that style, text other code
prints while a bar is live goes through rich's display and is not copied).

The CLI holds the log open for the whole command (:func:`command`), so the results table and a Ctrl-C message
printed after the stages are kept too; a library caller's log closes when :meth:`dare.run.Run.execute` ends.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import re
import sys
from pathlib import Path
from typing import Iterator, TextIO

__all__ = ["open_log", "close", "command", "note", "console_stream", "active_path"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")


class _State:
    file: TextIO | None = None
    path: Path | None = None
    saved: tuple | None = None  # (stdout, stderr) before the tees
    held = False  # the CLI keeps the log open until the command ends
    command: str | None = None


class _Tee:
    """A text stream that writes to ``stream`` and copies the text (ANSI codes removed) into the open log."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        n = self._stream.write(text)
        _copy(text)
        return n

    def flush(self) -> None:
        self._stream.flush()
        if _State.file is not None:
            _State.file.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding, buffer, ...: the console's
        return getattr(self._stream, name)


def _copy(text: str) -> None:
    f = _State.file
    if f is not None and text:
        f.write(_ANSI.sub("", text).replace("\r\n", "\n"))


def _untee(stream):
    stream = getattr(stream, "rich_proxied_file", stream)  # rich's live display redirects stderr through a proxy
    return stream._stream if isinstance(stream, _Tee) else stream


class _ConsoleStream:
    """``sys.stderr`` as it is at each call, without the copy into the log (for rich's live display)."""

    def __getattr__(self, name):
        return getattr(_untee(sys.stderr), name)


def console_stream():
    """A stream for rich's live display: the console's stderr, not copied into ``run.log``."""
    return _ConsoleStream()


def note(line: str) -> None:
    """Copy ``line`` into the open log only (a line the console showed through :func:`console_stream`)."""
    _copy(line.rstrip("\n") + "\n")


def active_path() -> Path | None:
    """The open log's path, or None."""
    return _State.path


def open_log(path: str | Path) -> bool:
    """Start copying the console into ``path`` (appended), unless a log is open already. Returns whether it opened.
    Call it on the main process only."""
    if _State.file is not None:
        return False
    path = Path(path)
    _State.file = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed by close()
    _State.path = path
    when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    _State.file.write(f"== {_State.command or 'dare'} ({when}) ==\n")
    _State.saved = (sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = _Tee(sys.stdout), _Tee(sys.stderr)
    return True


def close(force: bool = False) -> None:
    """Stop copying and close the log (kept open while the CLI holds it, unless ``force``)."""
    if _State.file is None or (_State.held and not force):
        return
    out, err = _State.saved
    if isinstance(sys.stdout, _Tee):  # something that replaced the stream meanwhile restores its own
        sys.stdout = out
    if isinstance(sys.stderr, _Tee):
        sys.stderr = err
    _State.file.close()
    _State.file = _State.path = _State.saved = None


@contextlib.contextmanager
def command(line: str) -> Iterator[None]:
    """Hold a log opened during the command (``line``: the command, named in the log's header) open until it ends."""
    _State.held, _State.command = True, line
    try:
        yield
    finally:
        _State.held, _State.command = False, None
        close(force=True)
