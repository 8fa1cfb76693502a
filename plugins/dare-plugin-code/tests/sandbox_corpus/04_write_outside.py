"""Write a file into a world-writable directory outside the sandbox; f() == 1 if it worked."""
import os

TARGET = os.path.join("$OUTSIDE", "pwned.txt")
try:
    with open(TARGET, "w") as fh:
        fh.write("pwned")
    WROTE = True
except OSError as exc:
    print("refused:", exc)
    WROTE = False


def f():
    return 1 if WROTE else 0
