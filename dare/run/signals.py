"""SIGTERM handled like Ctrl-C.

Batch schedulers and container platforms stop a job with SIGTERM (SLURM on preemption or at the time
limit, Kubernetes on eviction), then SIGKILL after a grace period. Python's default for SIGTERM is to
die at once, silently. Inside :func:`terminate_as_interrupt` a SIGTERM raises :class:`Terminated`, a
:class:`KeyboardInterrupt`, so the command stops the way it does on Ctrl-C: a save in progress is
abandoned in its staging directory (the previous checkpoint stays complete, :mod:`dare.trainers.base`),
and the CLI says what was saved and which command resumes; it then exits with status 143 (128 + 15).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["Terminated", "terminate_as_interrupt", "exit_status", "stop_message"]


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


def _raise_terminated(signum, frame):  # noqa: ARG001 - signal handler signature
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: the message is being written
    raise Terminated(f"received signal {signum} (SIGTERM)")


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread; the previous handler is restored
    after. Outside the main thread (where Python cannot install handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def exit_status(exc: BaseException) -> int:
    """The exit status of a command stopped by ``exc``: 143 for SIGTERM, 130 for Ctrl-C (shell conventions)."""
    return 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130


def stop_message(exc: BaseException, said: str) -> str:
    """``said`` (what was saved, how to resume), prefixed with ``received SIGTERM; `` when ``exc`` is
    :class:`Terminated`."""
    return f"received SIGTERM; {said}" if isinstance(exc, Terminated) else said
