"""Fill the disk: write 10 GiB into the working directory in files under the per-file limit;
f() == 1 if more than the disk quota was written."""
import os

chunk = b"x" * (1 << 20)
written = 0
try:
    for i in range(10 * 1024):
        with open(f"fill-{i // 8}.bin", "ab") as fh:
            fh.write(chunk)
        written += len(chunk)
except OSError as exc:
    print("stopped:", exc)
print("written MiB", written >> 20)


def f():
    return 1 if written > $MAX_DISK_MB * 2**20 else 0
