"""A time limit on one reward call: a reward that never returns stops the run with one paragraph.

:class:`CallDeadline` arms a watchdog thread around a call. When the call overruns ``timeout_s`` the
watchdog sends SIGINT to the calling thread when that is the main thread (where rewards are scored;
Python runs signal handlers there only): a Python loop or a blocking system call (``time.sleep``, a
read) is interrupted with :class:`KeyboardInterrupt`, which the caller turns into
:class:`RewardTimeoutError` when :meth:`CallDeadline.disarm` reports the overrun (a
:class:`~dare.errors.DareError`: the CLI prints it, exit status 2;
:class:`dare.rewards.WeightedReward` does this for every reward call). A call that does not return
:data:`GRACE_S` seconds later (C code that never checks for signals, a reward that swallows
``KeyboardInterrupt``, a call outside the main thread) ends the process: the watchdog writes the same
paragraph to stderr and exits with status 2, as the CLI would. SIGALRM is left alone (math-verify's
parsing timeouts use it).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from dare.errors import DareError

__all__ = ["GRACE_S", "EXIT_STATUS", "RewardTimeoutError", "CallDeadline"]

#: seconds a call has to return after the interrupt before the watchdog ends the process
GRACE_S = 5.0
#: the exit status of a process the watchdog ends (the CLI's status for a DareError)
EXIT_STATUS = 2


class RewardTimeoutError(DareError):
    """A reward call ran past its ``timeout_s``."""


class CallDeadline:
    """One watchdog thread (started at the first :meth:`arm`) for the calls of one reward sum; one call
    at a time."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._deadline = 0.0
        self._describe: Callable[[], str] | None = None
        self._target = 0
        self._calls = 0
        self._active: int | None = None  # the call being timed
        self._fired: int | None = None  # the last call the watchdog interrupted
        self._thread: threading.Thread | None = None
        self._restore: tuple[object, bool] | None = None  # the main thread's SIGINT handler and mask to put back

    def arm(self, timeout_s: float, describe: Callable[[], str]) -> None:
        """Start timing a call of at most ``timeout_s`` seconds; ``describe()`` says what overran."""
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="dare-reward-deadline", daemon=True)
                self._thread.start()
            self._calls += 1
            self._active = self._calls
            self._deadline = time.monotonic() + timeout_s
            self._describe = describe
            # Python runs signal handlers in the main thread only: another caller is not interrupted
            self._target = threading.get_ident() if threading.current_thread() is threading.main_thread() else 0
            if self._target:
                self._restore = _default_interrupt()
            self._cv.notify()

    def disarm(self) -> bool:
        """End the timed call; True when it had overrun (the watchdog interrupted it)."""
        with self._cv:
            overran = self._fired is not None and self._fired == self._active
            self._active = None
            self._cv.notify()
        if self._restore is not None:
            _restore_interrupt(*self._restore)
            self._restore = None
        return overran

    def error(self) -> RewardTimeoutError:
        """The error naming the call that overran (its ``describe()``)."""
        return RewardTimeoutError(self._describe() if self._describe is not None else "a reward call timed out")

    def _watch(self) -> None:
        while True:
            with self._cv:
                while self._active is None or time.monotonic() < self._deadline:
                    self._cv.wait(None if self._active is None else self._deadline - time.monotonic())
                call = self._fired = self._active
                target = self._target
            if target:
                try:
                    signal.pthread_kill(target, signal.SIGINT)
                except (OSError, ValueError):
                    pass
            end = time.monotonic() + GRACE_S
            with self._cv:
                while self._active == call and time.monotonic() < end:
                    self._cv.wait(end - time.monotonic())
                stuck = self._active == call
            if stuck:
                sys.stderr.write(f"error: {self.error()}\n")
                sys.stderr.flush()
                os._exit(EXIT_STATUS)


def _default_interrupt() -> tuple[object, bool]:
    """Make SIGINT raise :class:`KeyboardInterrupt` in the main thread for the timed call, whatever handler or
    signal mask the process had (a library's own SIGINT handler, a thread mask left blocked); returns what
    :func:`_restore_interrupt` puts back. A handler installed from C (``getsignal`` is None) is left alone."""
    handler = signal.getsignal(signal.SIGINT)
    if handler is not None and handler is not signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    return handler, blocked


def _restore_interrupt(handler: object, blocked: bool) -> None:
    if handler is not None and handler is not signal.default_int_handler:
        signal.signal(signal.SIGINT, handler)
    if blocked:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
