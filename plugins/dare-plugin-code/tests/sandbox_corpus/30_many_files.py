"""Exhaust inodes: create empty files and directories without end; f() == 1 if 200 000 were made."""
import os

made = 0
try:
    while made < 200_000:
        if made % 1000 == 0:
            os.mkdir(f"d{made}")
        open(f"d{made - made % 1000}/{made}", "w").close()
        made += 1
except OSError as exc:
    print("stopped:", exc)


def f():
    return 1 if made >= 200_000 else 0
