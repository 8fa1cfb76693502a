"""Allocate 10 GiB in one go (the per-process address-space limit must refuse it)."""
blob = bytearray(10 * 1024**3)


def f():
    return 1
