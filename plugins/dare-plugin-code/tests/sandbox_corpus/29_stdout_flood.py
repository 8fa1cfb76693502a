"""Flood stdout and stderr without end."""
import sys

line = "x" * 4096
while True:
    print(line)
    print(line, file=sys.stderr)


def f():
    return 1
