"""Patch its own machine code through /proc/self/mem (writes there ignore page protections, so pure
Python could run native code), opened through a directory descriptor so the Python guard sees only a
relative path; f() == 1 if the file opened for writing."""
import os

try:
    proc = os.open("/proc/self", os.O_RDONLY | os.O_DIRECTORY)
    fd = os.open("mem", os.O_RDWR, dir_fd=proc)
    opened = 1
    os.close(fd)
except OSError as exc:
    print("refused:", exc)
    opened = 0


def f():
    return opened
