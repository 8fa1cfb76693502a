"""Native code: write a shared object (built by the test from tests/native_attack.c) into its own
directory and load it with ctypes (loading is allowed; its constructor then runs with no Python
guard: writes outside, SysV IPC, keyring, other processes' limits, a fork, a host Unix socket);
f() == 1 if the library's code ran."""
import ctypes
import os

with open("attack.so", "wb") as out:
    out.write(bytes.fromhex("$NATIVE_SO_HEX"))
try:
    ctypes.CDLL(os.path.abspath("attack.so"))
except OSError as exc:
    print("refused:", exc)


def f():
    return 1 if os.path.exists("native_ran.txt") else 0
