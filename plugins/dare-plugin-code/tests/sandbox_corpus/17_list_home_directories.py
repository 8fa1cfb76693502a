"""List home directories and the caller's tree; f() == 1 if any listing worked."""
import os

SEEN = []
for path in ("/root", "/home", "/work", "/etc", "/", "$CALLER_DIR"):
    try:
        SEEN += [os.path.join(path, name) for name in os.listdir(path)]
    except OSError as exc:
        print("refused:", exc)
print(SEEN[:50])


def f():
    return 1 if SEEN else 0
