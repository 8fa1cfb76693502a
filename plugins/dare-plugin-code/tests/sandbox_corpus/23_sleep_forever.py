"""Sleep far past the time limit (no CPU used: only the wall clock stops it)."""
import time

time.sleep(1000)


def f():
    return 1
