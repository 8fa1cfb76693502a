"""Lift the address-space and process limits, then allocate 10 GiB; f() == 1 if it got the memory."""
import resource

for kind in (resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE):
    try:
        resource.setrlimit(kind, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (OSError, ValueError) as exc:
        print("refused:", exc)
try:
    blob = bytearray(10 * 1024**3)
    OK = True
except MemoryError:
    OK = False


def f():
    return 1 if OK else 0
