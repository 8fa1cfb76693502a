"""Spin forever at the top level: the wall-clock limit must end it."""
while True:
    pass


def f():
    return 1
