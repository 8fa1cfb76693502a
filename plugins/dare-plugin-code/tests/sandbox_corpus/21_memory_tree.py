"""Spread memory over a process tree: 4 processes each touching 80% of memory_mb (each under its
own address-space limit); f() == 1 if all of them held it at once."""
import os
import time

size = int($MEMORY_MB * 0.8) * 2**20
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        blob = bytearray(b"x" * size)
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
blob = bytearray(b"x" * size)
time.sleep(2)


def f():
    return 1
