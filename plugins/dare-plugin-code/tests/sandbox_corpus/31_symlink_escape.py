"""Escape through symbolic and hard links made in the working directory; f() == 1 if it read or
wrote through them."""
import os

OK = False
for target, name in (("/etc/shadow", "shadow"), ("$SECRET_FILE", "key"), ("$OUTSIDE", "out")):
    try:
        os.symlink(target, name)
    except OSError as exc:
        print("refused:", exc)
for action in (lambda: open("shadow").read(), lambda: open("key").read(), lambda: open("out/linked.txt", "w").write("x"),
               lambda: os.link("$SECRET_FILE", "hard") or open("hard").read()):
    try:
        action()
        OK = True
    except OSError as exc:
        print("refused:", exc)


def f():
    return 1 if OK else 0
