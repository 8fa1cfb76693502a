"""SIGKILL every process it may signal (kill(-1)) and PID 1; f() == 1 if a signal was delivered."""
import os
import signal

OK = False
for pid in (-1, 1):
    try:
        os.kill(pid, signal.SIGKILL)
        OK = True
    except OSError as exc:
        print("refused:", exc)


def f():
    return 1 if OK else 0
