"""Burn CPU in as many threads as allowed, at the top level."""
import threading


def spin():
    while True:
        pass


for _ in range(64):
    try:
        threading.Thread(target=spin, daemon=True).start()
    except RuntimeError:
        break
spin()


def f():
    return 1
