"""Store data outside the working directory in shared memory (/dev/shm, /run/shm, /var/tmp);
f() == 1 if more than 4 MiB went anywhere."""
import os

stored = 0
for place in ("/dev/shm", "/run/shm", "/var/tmp", "/dev/mqueue"):
    try:
        with open(os.path.join(place, "hoard.bin"), "wb") as fh:
            for _ in range(64):
                fh.write(b"x" * (1 << 20))
                stored += 1 << 20
    except OSError as exc:
        print("refused:", exc)


def f():
    return 1 if stored > 4 << 20 else 0
