"""SIGKILL the parent (the supervisor) and its process group; f() == 1 if a signal was delivered."""
import os
import signal

OK = False
for action in (lambda: os.kill(os.getppid(), signal.SIGKILL), lambda: os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)):
    try:
        action()
        OK = True
    except OSError as exc:
        print("refused:", exc)


def f():
    return 1 if OK else 0
