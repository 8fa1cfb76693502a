"""Bypass the Python-level path check with a dir_fd-relative open; f() == 1 if it worked."""
import os

WROTE = False
try:
    root = os.open("/", os.O_RDONLY)
    fd = os.open("$OUTSIDE"[1:] + "/pwned-dirfd.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=root)
    os.write(fd, b"pwned")
    WROTE = True
except OSError as exc:
    print("refused:", exc)


def f():
    return 1 if WROTE else 0
