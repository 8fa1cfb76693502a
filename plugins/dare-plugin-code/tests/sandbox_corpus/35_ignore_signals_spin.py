"""Ignore every catchable signal, then spin."""
import signal

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU, signal.SIGQUIT, signal.SIGUSR1):
    signal.signal(sig, signal.SIG_IGN)
while True:
    pass


def f():
    return 1
