"""Native code from /dev/shm (a tmpfs usually mounted exec), written through a directory descriptor
so the Python guard sees only a relative path; f() == 1 if its code ran."""
import ctypes
import os

try:
    shm = os.open("/dev/shm", os.O_RDONLY | os.O_DIRECTORY)
    fd = os.open("attack.so", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700, dir_fd=shm)
    os.write(fd, bytes.fromhex("$NATIVE_SO_HEX"))
    os.close(fd)
    ctypes.CDLL("/dev/shm/attack.so")
except OSError as exc:
    print("refused:", exc)


def f():
    return 1 if os.path.exists("native_ran.txt") else 0
